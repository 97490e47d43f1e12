"""The demo: SFT of a random-init tiny Llama on the arithmetic task, on this machine's CPU.

Runs the real CLI (`python -m alignment.cli.train_sft`, DeepSpeed ZeRO-2) and then prints what
the model learned: the loss curve and held-out greedy accuracy before and after.
(The pipelines issue grows this into the full sft -> rm -> ppo Prefect flow.)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")

from alignment.tiny_world.recipes import sft_flags  # noqa: E402

def sparkline(values: list[float], width: int = 60) -> str:
    bars = "▁▂▃▄▅▆▇█"
    step = max(1, len(values) // width)
    picked = values[::step]
    lo, hi = min(picked), max(picked)
    return "".join(bars[int((v - lo) / (hi - lo + 1e-12) * (len(bars) - 1))] for v in picked)


def main() -> None:
    from alignment.tiny_world.base_model import make_base
    from alignment.tiny_world.evaluate import greedy_accuracy

    out = REPO / "runs" / "demo"
    shutil.rmtree(out, ignore_errors=True)
    base = make_base(out / "base", seed=0)
    before = greedy_accuracy(base)
    print(f"[demo] random-init base: held-out accuracy {before.accuracy:.1%} on {before.n} questions", flush=True)
    t0 = time.time()
    cmd = [sys.executable, "-m", "alignment.cli.train_sft", "--pretrain", str(base),
           "--save_path", str(out / "sft"), "--ckpt_path", str(out / "sft_ckpt"), *sft_flags()]
    print("[demo] " + " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, cwd=REPO)
    minutes = (time.time() - t0) / 60
    after = greedy_accuracy(out / "sft")
    losses = [r["train/loss"] for r in map(json.loads, (out / "sft" / "metrics.jsonl").read_text().splitlines())
              if "train/loss" in r]
    print("\n=== alignflow demo: SFT on the arithmetic task ===")
    print(f"training time     {minutes:.1f} min on {os.cpu_count()} CPU cores")
    print(f"train loss        {losses[0]:.3f} -> {losses[-1]:.3f}   {sparkline(losses)}")
    print(f"held-out accuracy {before.accuracy:.1%} (random init) -> {after.accuracy:.1%} (SFT), {after.n} questions")
    for q, resp, label in after.examples:
        mark = "ok " if resp.split("=")[-1].strip() == label else "err"
        print(f"  [{mark}] {q:<22} -> {resp!r} (answer {label})")
    print(f"model             {out / 'sft'} (HF format: AutoModelForCausalLM.from_pretrained works)")


if __name__ == "__main__":
    main()
