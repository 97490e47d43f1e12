"""Where a training step's time goes, ours and TRL's, on the benchmark's workloads: each side runs
once under torch.profiler (in a process of its own) and prints its throughput (SFT tokens/s, RM and
DPO pairs/s, as trl_compare counts them), the share of
operator time spent in matmuls and its top operators.

    .venv/bin/python benchmarks/op_profile.py --kind sft --steps 8          # both sides
    .venv/bin/python benchmarks/op_profile.py --kind rm --side ours

The same model, data and settings as benchmarks/trl_compare.py (its RunSpecs), fewer steps.
Shares are of all operator time in the run: start-up and our evaluation passes included.
FLOP counting is off: the profiler's per-op shape inspection slowed TRL's many small ops ~2x.
A matmul share near 80 % means the step is arithmetic: what the other side does not compute is
the room left. Figures: docs/benchmarks.md ("Where the time goes").
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import runpy
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
MATMULS = ("aten::mm", "aten::bmm", "aten::addmm")


def profile_side(spec_path: Path, side: str) -> dict:
    """Run one side of `spec_path` under the profiler, in this process."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.compare import ours
    from benchmarks.compare.spec import RunSpec, throughput

    spec = RunSpec.load(spec_path)
    torch.set_num_threads(spec.threads)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        if side == "ours":
            importlib.import_module(ours.MODULES[spec.kind]).main(ours.stage_args(spec))
            times = ours.step_times(spec)
            tokens = ours.sft_tokens_per_step(spec) if spec.kind == "sft" else None
        else:
            result = Path(spec.out_dir) / "result.json"
            sys.argv = ["trl_runner.py", str(spec_path), str(result)]
            runpy.run_path(str(REPO / "benchmarks" / "compare" / "trl_runner.py"), run_name="__main__")
            out = json.loads(result.read_text())
            times, tokens = out["step_times"], out["tokens_per_step"]
    ops = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ops)
    mm = [e for e in ops if e.key in MATMULS]
    mm_us = sum(e.self_cpu_time_total for e in mm)
    units = tokens if spec.kind == "sft" else [spec.batch] * len(times)
    return {
        "side": side,
        "rate": throughput(times, units),
        "mm_share": mm_us / total,
        "top": [(e.key, e.self_cpu_time_total / total) for e in sorted(ops, key=lambda e: -e.self_cpu_time_total)[:6]],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("sft", "rm", "dpo"), default="sft")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--side", choices=("ours", "trl", "both"), default="both")
    ap.add_argument("--work", type=Path, default=Path("runs/op_profile"))
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # internal: SPEC_PATH SIDE, in a fresh process
    args = ap.parse_args()
    if args.one:
        print("OP_PROFILE " + json.dumps(profile_side(Path(args.one[0]), args.one[1])), flush=True)
        return
    if args.steps < 3:  # throughput is counted from the end of step 1
        print(f"error: --steps {args.steps}: give at least 3", file=sys.stderr)
        raise SystemExit(2)
    from alignment.tiny_world.base_model import make_base
    from benchmarks.compare.suite import FULL, run_specs
    from benchmarks.compare.workloads import base_env
    from benchmarks.trl_compare import MODELS

    work = args.work.resolve()
    model = work / "model"
    if not (model / "config.json").exists():
        make_base(model, seed=0, config_overrides=MODELS["full"])
    spec = replace(run_specs(str(model), FULL, threads=2)[args.kind], steps=args.steps)
    env = base_env(spec.threads, work)  # trl_compare's: threads, offline hubs, DeepSpeed on the CPU
    unit = "tokens/s" if args.kind == "sft" else "pairs/s"
    print(f"| {args.kind}, {args.steps} steps | {unit} | matmul share of op time | top operators |")
    print("|---|---|---|---|")
    for side in ("ours", "trl") if args.side == "both" else (args.side,):
        out = work / f"{args.kind}_{side}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        spec_path = replace(spec, out_dir=str(out)).save(out / "spec.json")
        done = subprocess.run(
            [sys.executable, __file__, "--one", str(spec_path), side], env=env, cwd=REPO, capture_output=True, text=True
        )
        line = [x for x in done.stdout.splitlines() if x.startswith("OP_PROFILE ")]
        if done.returncode or not line:
            sys.exit(f"{side} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        r = json.loads(line[-1].split(" ", 1)[1])
        top = ", ".join(f"{k.removeprefix('aten::')} {100 * v:.1f} %" for k, v in r["top"])
        print(f"| {side} | {r['rate']:.4g} | {100 * r['mm_share']:.1f} % | {top} |", flush=True)


if __name__ == "__main__":
    main()
