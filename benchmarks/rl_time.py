"""Where RL's time goes when an environment is slow: multi-turn agent RL on the tiny world's retry environment
behind a heavy-tailed latency (data/tiny/agent_retry_slow.py: lognormal steps, mean 0.3 s, p99 3.2 s), the same
SFT start, seed and iterations, with lock-step turns, with streaming episodes (--agent_batch_linger_ms), and with
streaming episodes in a pool that outlives the iteration (--async_train: alignment/agents/pool.py).

Per run: episodes per second of generation, the trainer's busy share (its update's share of the iteration's
wall time), wall time, and held-out greedy accuracy (first answer, the retry world without latency). Writes a
JSON and a page with a chart.

    .venv/bin/python benchmarks/rl_time.py [SFT_DIR] [--iterations 12] [--out docs/rl-time.md]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.agent_learning import ENV, heldout, rl_flags  # noqa: E402

SLOW_ENV = REPO / "data" / "tiny" / "agent_retry_slow.py"
RUNS = {
    "lock-step turns": [],
    "streaming episodes (--agent_batch_linger_ms 50)": ["--agent_batch_linger_ms", "50"],
    "streaming + episode pool (--async_train)": ["--agent_batch_linger_ms", "50", "--async_train"],
}


def measure(sft: str, out: Path, seed: int, iterations: int, extra: list[str]) -> dict:
    flags = [str(SLOW_ENV) if f == str(ENV) else f for f in rl_flags(sft, out, seed, iterations, "multi-turn")]
    t0 = time.time()
    subprocess.run(
        [sys.executable, "-m", "alignment.cli.train_ppo", *flags, *extra],
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.time() - t0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    phases = {k: sum(r[f"train/time_{k}"] for r in rows) for k in ("generate", "experience", "train", "sync")}
    episodes = len(rows) * rl_batch(flags)
    return {
        "episodes_per_s": episodes / phases["generate"],
        "trainer_busy": phases["train"] / sum(phases.values()),
        "phases_s": phases,
        "wall_s": wall,
        "heldout": heldout(str(out), 300)["final"],
    }


def rl_batch(flags: list[str]) -> int:
    value = lambda name: int(flags[flags.index(name) + 1])  # noqa: E731
    return value("--rollout_batch_size") * value("--n_samples_per_prompt")


def page(results: dict, iterations: int, chart: Path) -> str:
    rows = "\n".join(
        f"| {name} | {r['episodes_per_s']:.1f} | {100 * r['trainer_busy']:.0f} % | {r['wall_s']:.0f} s | "
        f"{100 * r['heldout']:.1f} % |"
        for name, r in results.items()
    )
    return f"""# Where RL's time goes with a slow environment

Multi-turn agent RL on the tiny world's retry environment behind a heavy-tailed latency
(`data/tiny/agent_retry_slow.py`: each step waits a lognormal time, mean 0.3 s, median 0.1 s, 99th
percentile 3.2 s). {iterations} iterations of 16 prompts × 8 episodes from the shipped SFT start
(`benchmarks/tiny_sft`), group_norm, seed 42, the HF engine. Measured {date.today()} on this 2-core CPU with
`.venv/bin/python benchmarks/rl_time.py`.

| run | episodes/s of generation | trainer busy | wall time | held-out greedy accuracy |
|---|---|---|---|---|
{rows}

![episodes per second and trainer busy share](img/{chart.name})

Lock-step turns send a turn's generation batch when every live episode waits on the model, so each turn waits for
its slowest environment step: with 128 episodes a turn, that is nearly always one from the tail. Streaming
(`--agent_batch_linger_ms 50`) sends what has waited 50 ms and generates it while the other environments'
steps go on, so a slow step holds only its own episode; but an iteration still trains only when all of its
episodes are done, so the iteration's slowest episode bounds it. The episode pool (`--async_train` with an
agent on the HF engine) holds the next iteration's prompts too (`--async_queue_size 1`): an iteration trains
on the first 16 groups to finish, and the others go on, their environments stepping while the actor trains,
joining the next batch, at most one policy update old (the bound; measured per sample as
`train/staleness/max`). The HF engine is the actor itself, so generation and training still take turns on
these two cores; what the pool removes is the wait on the environment's tail. The held-out column is after
only {iterations} iterations: it shows that no run broke the model, not what each run learns.
"""


def draw(results: dict, chart: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, key, label in zip(axes, ("episodes_per_s", "trainer_busy"), ("episodes/s", "trainer busy share")):
        ax.barh(names, [results[n][key] for n in names], color=["#9aa", "#6b9", "#2a7"])
        ax.set_xlabel(label)
    axes[1].set_yticklabels([])
    fig.tight_layout()
    chart.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(chart, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sft", nargs="?", default=str(REPO / "benchmarks" / "tiny_sft"))
    p.add_argument("--iterations", type=int, default=12)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--work", default="/tmp/alignflow-rl-time", help="where the runs' models go")
    p.add_argument("--out", default=str(REPO / "docs" / "rl-time.md"))
    p.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "rl_time.json"))
    p.add_argument("--chart", default=str(REPO / "docs" / "img" / "rl-time.png"))
    a = p.parse_args()
    results = {}
    for k, (name, extra) in enumerate(RUNS.items()):
        results[name] = measure(a.sft, Path(a.work) / f"run{k}", a.seed, a.iterations, extra)
        print(name, json.dumps(results[name]), flush=True)
    Path(a.json).write_text(json.dumps({"iterations": a.iterations, "seed": a.seed, "runs": results}, indent=1))
    draw(results, Path(a.chart))
    Path(a.out).write_text(page(results, a.iterations, Path(a.chart)))


if __name__ == "__main__":
    main()
