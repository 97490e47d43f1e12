"""The demo: the whole sft-rm-ppo pipeline on the embedded default, on this machine's CPU.

A Prefect flow (ephemeral API, no server to start) runs each stage as a Ray job on a local
Ray head: a seeded random-init tiny Llama → SFT on the arithmetic task → reward model →
PPO-family with that reward model, checkpoints committed to a local store (runs/demo/store).
Then it prints a short report: per stage the wall time, the committed model and its key
metric, the reward curve of the RL stage, and held-out greedy accuracy after SFT and after RL.
Run it again and every committed stage is skipped (delete runs/demo to start over).
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("PREFECT_HOME", str(REPO / "runs" / "demo" / "prefect"))  # keeps ~/.prefect untouched
Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)   # before prefect is imported


def sparkline(values: list[float], width: int = 60) -> str:
    bars = "▁▂▃▄▅▆▇█"
    step = max(1, len(values) // width)
    picked = values[::step]
    lo, hi = min(picked), max(picked)
    return "".join(bars[int((v - lo) / (hi - lo + 1e-12) * (len(bars) - 1))] for v in picked)


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def report(result: dict, total: float, out: Path) -> dict:
    """Print the demo's report for a finished sft-rm-ppo flow; write it as JSON to `out`."""
    from alignflow.tasks.artifacts import read_metrics
    from alignment.models.loading import resolve_model_path
    from alignment.tiny_world.evaluate import greedy_accuracy

    print("\n=== alignflow demo: sft -> rm -> ppo on the arithmetic task (embedded Prefect + local Ray) ===")
    print(f"{'stage':10s} {'wall':>8s} {'loop':>7s}  {'key metric':38s} model")
    key = {"tiny_base": lambda m: "random init",
           "sft": lambda m: f"eval loss {m.get('eval/loss', m.get('train/loss', float('nan'))):.3f}",
           "rm": lambda m: f"held-out pair accuracy {m.get('eval/acc', float('nan')):.1%}",
           "ppo": lambda m: f"sampled reward {m.get('train/reward', float('nan')):.3f} (last iteration)"}
    # wall: the stage task (Ray job submit -> process start -> model load -> loop -> commit);
    # loop: the training loop inside the job (from the stage's own final metrics)
    for name, r in result.items():
        state = "skipped" if r["skipped"] else f"{r['stage_wall_s']:.0f} s"
        loop = r["metrics"].get("time/loop_s")
        loop_s = f"{loop:.0f} s" if loop is not None and not r["skipped"] else "-"
        print(f"{name:10s} {state:>8s} {loop_s:>7s}  {key[name](r['metrics']):38s} {r['model_uri']}")
    ran = [r for r in result.values() if not r["skipped"]]
    stages_s = sum(r["stage_wall_s"] for r in ran)
    loops_s = sum(r["metrics"].get("time/loop_s", 0.0) for r in ran)
    phases = {"training loops": loops_s, "stage jobs' start-up, model loading, commits": stages_s - loops_s,
              "Prefect + Ray start-up and the rest": total - stages_s}
    print(f"total      {total:6.0f} s  = " + " + ".join(f"{v:.0f} s {k}" for k, v in phases.items()))

    rows = [r for r in read_metrics(result["ppo"]["model_uri"]) if "train/reward" in r]
    rewards = [r["train/reward"] for r in rows]
    k = max(1, len(rewards) // 4)
    print(f"\nRL reward (RM score per sample, {len(rewards)} iterations): first quarter {mean(rewards[:k]):.3f} -> "
          f"last quarter {mean(rewards[-k:]):.3f}   {sparkline(rewards)}")
    if "train/kl" in rows[-1]:
        print(f"KL to the SFT policy at the end: {rows[-1]['train/kl']:.3f}")
    else:
        print("KL to the SFT policy: not measured (init_kl_coef 0: no KL term, so no reference model is loaded)")
    sft_acc = greedy_accuracy(resolve_model_path(result["sft"]["model_uri"]))
    ppo_acc = greedy_accuracy(resolve_model_path(result["ppo"]["model_uri"]))
    print(f"held-out greedy accuracy ({sft_acc.n} questions): after SFT {sft_acc.accuracy:.1%}, "
          f"after RL {ppo_acc.accuracy:.1%}")
    for q, resp, label in ppo_acc.examples:
        mark = "ok " if resp.split("=")[-1].strip() == label else "err"
        print(f"  [{mark}] {q:<22} -> {resp!r} (answer {label})")
    print("curves: metrics.jsonl next to each model above, and as Prefect artifacts "
          f"(PREFECT_HOME={os.environ.get('PREFECT_HOME')})")
    summary = {"stages": result, "total_s": total, "phases_s": phases, "rl_reward_first_quarter": mean(rewards[:k]),
               "rl_reward_last_quarter": mean(rewards[-k:]), "sft_accuracy": sft_acc.accuracy,
               "rl_accuracy": ppo_acc.accuracy}
    out.write_text(json.dumps(summary, indent=1))
    return summary


def main() -> None:
    from alignflow.flows.sft_rm_ppo import sft_rm_ppo_flow

    t0 = time.time()
    result = asyncio.run(sft_rm_ppo_flow(run_name="demo", store=str(REPO / "runs" / "demo" / "store")))
    report(result, time.time() - t0, REPO / "runs" / "demo" / "report.json")


if __name__ == "__main__":
    main()
