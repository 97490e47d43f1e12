"""Distillation on the tiny world: a teacher (e.g. an RL-trained model) distilled into the SFT model by
knowledge distillation (train_kd, deployments/recipes/tiny/kd.yaml) and by on-policy distillation (train_opd,
deployments/recipes/tiny/opd.yaml), several seeds. Every model — teacher, student before, after KD, after OPD —
is measured greedily on the 300 held-out questions (alignment.cli.eval_tiny); each run's wall time and optimizer
steps are kept, and an SFT run of the same steps on the same data (kd.yaml with kd_coef 0) gives the throughput
and the accuracy KD is compared with. A finished (method, seed) is read back from OUT_DIR.

Usage: .venv/bin/python benchmarks/distill_learning.py TEACHER SFT_DIR OUT_DIR [--seeds 42 43 44]
Writes OUT_DIR/distill_learning.json and prints a markdown table (docs/distillation.md keeps the dated one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
RECIPES = REPO / "deployments" / "recipes" / "tiny"
# method -> (CLI, recipe file, extra flags); "sft" runs kd.yaml's budget on sft.yaml, without the teacher
METHODS = {
    "sft": ("train_sft", "sft.yaml", ["--max_steps", "300", "--learning_rate", "0.0005", "--eval_steps", "100"]),
    "kd": ("train_kd", "kd.yaml", []),
    "opd": ("train_opd", "opd.yaml", []),
}


def accuracy(model: str | Path) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "alignment.cli.eval_tiny", "--pretrain", str(model)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)["accuracy"]


def train(method: str, teacher: str, sft: str, out: Path, seed: int) -> dict:
    cli, recipe, extra = METHODS[method]
    t0 = time.time()
    teacher_flags = [] if cli == "train_sft" else ["--teacher_model", teacher]
    subprocess.run(
        [
            sys.executable,
            "-m",
            f"alignment.cli.{cli}",
            "--config",
            str(RECIPES / recipe),
            "--pretrain",
            sft,
            *teacher_flags,
            "--save_path",
            str(out),
            "--save_steps",
            "-1",
            "--seed",
            str(seed),
            *extra,
        ],
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.time() - t0
    steps = max(json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines())
    return {"wall_s": wall, "steps": steps, "accuracy": accuracy(out)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("teacher")
    p.add_argument("sft")
    p.add_argument("out", type=Path)
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    cache = a.out / "distill_learning.json"
    results = json.loads(cache.read_text()) if cache.exists() else {}
    for name, model in (("teacher", a.teacher), ("student", a.sft)):
        results.setdefault(name, {"accuracy": accuracy(model)})
    for seed in a.seeds:
        for method in METHODS:
            key = f"{method}/{seed}"
            if key not in results:
                results[key] = train(method, a.teacher, a.sft, a.out / method / str(seed), seed)
                cache.write_text(json.dumps(results, indent=1))
                print(key, results[key], flush=True)
    cache.write_text(json.dumps(results, indent=1))
    print(table(results))


def table(results: dict) -> str:
    lines = [
        "| model | held-out greedy accuracy | runs | wall time per run | optimizer steps per second |",
        "|---|---|---|---|---|",
        f"| teacher | {results['teacher']['accuracy']:.1%} | - | - | - |",
        f"| student before (SFT) | {results['student']['accuracy']:.1%} | - | - | - |",
    ]
    for method in METHODS:
        runs = [v for k, v in results.items() if k.startswith(method + "/")]
        if not runs:
            continue
        acc = [r["accuracy"] for r in runs]
        spread = f" ± {statistics.stdev(acc):.1%}" if len(acc) > 1 else ""
        wall = statistics.mean(r["wall_s"] for r in runs)
        rate = statistics.mean(r["steps"] / r["wall_s"] for r in runs)
        label = "continued SFT (no teacher)" if method == "sft" else method.upper()
        lines.append(
            f"| after {label} | {statistics.mean(acc):.1%}{spread} | {len(runs)} | {wall:.0f} s | {rate:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
