"""DAPO's dynamic sampling on the tiny world: group_norm on the rule reward from one SFT start, without
--dynamic_filtering, with it (range 0 1), and with it drawing prompts by their history
(--dynamic_filtering_recheck 0.25), same seed and iterations. Reports the sampled reward curve of each, how many
iterations a filtered run needs to reach the unfiltered run's final reward (mean of its last 10 iterations),
the prompts each generated in all (its cost), the share of generated tokens that reached a gradient, and
held-out greedy accuracy.

Usage: .venv/bin/python benchmarks/dynamic_filtering.py SFT_DIR OUT_DIR [--iterations 148] [--seed 42]
Writes OUT_DIR/dynamic_filtering.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")

from benchmarks.agent_learning import rl_flags  # noqa: E402  (the same single-turn stage)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("sft")
    p.add_argument("out", type=Path)
    p.add_argument("--iterations", type=int, default=148)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()
    from alignment.tiny_world.evaluate import greedy_accuracy

    results = {}
    filtering = ["--dynamic_filtering", "--dynamic_filtering_reward_range", "0", "1"]
    for name, extra in (
        ("sync", []),
        ("dynamic_filtering", filtering),
        ("dynamic_filtering+history", [*filtering, "--dynamic_filtering_recheck", "0.25"]),
    ):
        out = a.out / name
        t0 = time.time()
        if not (out / "MANIFEST.json").exists():
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "alignment.cli.train_ppo",
                    *rl_flags(a.sft, out, a.seed, a.iterations, "single-turn"),
                    *extra,
                ],
                cwd=REPO,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        # the policy's own draw: an unfiltered run's reward, a filtered run's reward before it drops groups
        key = "train/dynamic_filtering/sampled_reward" if extra else "train/reward"
        results[name] = {
            "reward": [r[key] for r in rows],
            "wall_s": time.time() - t0,
            "prompts_generated": sum(r.get("train/dynamic_filtering/prompts_generated", 16) for r in rows),
            "gradient_token_share": sum(r.get("train/dynamic_filtering/gradient_token_share", 1.0) for r in rows)
            / len(rows),
            "heldout": greedy_accuracy(out).accuracy,
        }
    target = sum(results["sync"]["reward"][-10:]) / 10
    runs = [k for k in results if k != "sync"]
    results["summary"] = {
        "sync_final_reward": target,
        "iterations_to_reach": {k: reached(results[k]["reward"], target) for k in runs},
        **{
            key: {k: v[key] for k, v in results.items()}
            for key in ("prompts_generated", "gradient_token_share", "heldout", "wall_s")
        },
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "dynamic_filtering.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results["summary"], indent=1))


def reached(curve: list[float], target: float) -> int | None:
    """The first iteration whose running mean of 10 reaches `target` (the unfiltered run's last 10)."""
    means = [sum(curve[max(0, i - 9) : i + 1]) / len(curve[max(0, i - 9) : i + 1]) for i in range(len(curve))]
    return next((i + 1 for i, m in enumerate(means) if m >= target), None)


if __name__ == "__main__":
    main()
