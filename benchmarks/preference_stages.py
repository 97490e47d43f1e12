"""Figures for the preference stages on the tiny world (2-core CPU, ~15 minutes in all).

SFT (the demo recipe) from the seeded random-init base, then from that SFT model:
  RM   -> held-out pairwise accuracy, and agreement with the rule-based reward on the SFT model's
          own samples (pairs of a right and a wrong sample of the same prompt);
  DPO  -> held-out greedy exact-match accuracy vs SFT's;
  KTO  -> the same, on the unpaired view of the data.
Usage: .venv/bin/python benchmarks/preference_stages.py [OUT_DIR] [--reuse-sft]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "deployments" / "recipes" / "tiny"  # the tiny recipe: one YAML per stage
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")


def run(module: str, args: list[str]) -> float:
    t0 = time.time()
    print(f"[bench] python -m {module} {' '.join(args)}", flush=True)
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{module} failed:\n{proc.stderr[-3000:]}")
    return time.time() - t0


def last_eval(path: Path) -> dict:
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if any(k.startswith("eval/") for k in r)][-1]


def main() -> None:
    from alignment.tiny_world.base_model import make_base
    from alignment.tiny_world.evaluate import greedy_accuracy, rm_agreement

    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out = Path(args[0] if args else REPO / "runs" / "preference_bench")
    out.mkdir(parents=True, exist_ok=True)
    sft = out / "sft"
    if not ("--reuse-sft" in sys.argv and (sft / "MANIFEST.json").exists()):
        base = make_base(out / "base", seed=0)
        run(
            "alignment.cli.train_sft",
            [
                "--pretrain",
                str(base),
                "--save_path",
                str(sft),
                "--ckpt_path",
                str(out / "sft_ckpt"),
                "--config",
                str(RECIPE / "sft.yaml"),
            ],
        )
    report = {"sft_accuracy": greedy_accuracy(sft).accuracy}
    report["rm_s"] = run(
        "alignment.cli.train_rm",
        [
            "--pretrain",
            str(sft),
            "--save_path",
            str(out / "rm"),
            "--ckpt_path",
            str(out / "rm_ckpt"),
            "--config",
            str(RECIPE / "rm.yaml"),
        ],
    )
    report["rm_heldout_pair_accuracy"] = last_eval(out / "rm")["eval/acc"]
    agreement = rm_agreement(out / "rm", sft)
    report["rm_rule_agreement"], report["rm_agreement_pairs"] = agreement.pairwise, agreement.pairs
    for stage in ("dpo", "kto"):
        report[f"{stage}_s"] = run(
            f"alignment.cli.train_{stage}",
            [
                "--pretrain",
                str(sft),
                "--save_path",
                str(out / stage),
                "--ckpt_path",
                str(out / f"{stage}_ckpt"),
                "--config",
                str(RECIPE / f"{stage}.yaml"),
            ],
        )
        report[f"{stage}_accuracy"] = greedy_accuracy(out / stage).accuracy
    (out / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
