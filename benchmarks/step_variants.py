"""One SFT training step of the benchmark model (25.4 M parameters) in plain torch, several ways:
fp32 eager, fp32 under `torch.compile`, bf16 weights (what our --bf16 trains with) and fp32
weights under bf16 autocast (what TRL's bf16=True does). Same batches for every variant, medians
over the steps after the first two.

    .venv/bin/python benchmarks/step_variants.py                     # every variant, 10 steps each
    .venv/bin/python benchmarks/step_variants.py --variants eager,compile --steps 14

It answers whether a variant is worth building into the trainers: a variant that only moves both
sides of the TRL comparison alike (bf16 vs autocast), or none (compile), is not. Figures:
docs/benchmarks.md ("Where the time goes").
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
VARIANTS = ("eager", "compile", "bf16", "autocast")


def batches(n: int, seed: int = 0) -> list:
    """n packed micro-batches of 32 samples of 18-36 tokens (the tiny world's SFT sizes), rows of <= 64."""
    import torch

    from alignment.datasets.batch import TokenizedSample, collate_packed

    rng = random.Random(seed)

    def sample() -> TokenizedSample:
        n_tok = rng.randint(18, 36)
        return TokenizedSample(
            [rng.randrange(1, 270) for _ in range(n_tok)], [0] * (n_tok // 2) + [1] * (n_tok - n_tok // 2)
        )

    return [collate_packed([sample() for _ in range(32)], torch.bool, 64) for _ in range(n)]


def time_variant(model_dir: Path, variant: str, steps: int, threads: int) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM

    from alignment.losses.nll import sft_loss

    torch.set_num_threads(threads)
    dtype = torch.bfloat16 if variant == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa").train()
    if variant == "compile":
        model.compile(dynamic=True)  # the packed rows' count and width change from batch to batch
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if variant == "autocast" else contextlib.nullcontext()
    times = []
    for b in batches(steps):
        t = time.perf_counter()
        with ctx:
            logits = model(
                input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids, use_cache=False
            ).logits
            loss = sft_loss(logits.float(), b.input_ids, b.loss_mask)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t)
    return times


def refuse(message: str) -> None:
    """Bad input: one line, exit 2, before any model is built."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {','.join(VARIANTS)}")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("runs/step_variants"))
    args = ap.parse_args()
    wanted = [v for v in args.variants.split(",") if v]
    if unknown := [v for v in wanted if v not in VARIANTS]:
        refuse(f"--variants {','.join(unknown)}: choose from {','.join(VARIANTS)}")
    if args.steps < 4:
        refuse(f"--steps {args.steps}: give at least 4 (the first two are not counted)")
    from alignment.tiny_world.base_model import make_base
    from benchmarks.trl_compare import MODELS

    model_dir = args.work.resolve() / "model"
    if not (model_dir / "config.json").exists():
        make_base(model_dir, seed=0, config_overrides=MODELS["full"])
    print("| variant | first step (s) | median step, steps 3+ (s) |\n|---|---|---|")
    for v in wanted:
        times = time_variant(model_dir, v, args.steps, args.threads)
        print(f"| {v} | {times[0]:.2f} | {statistics.median(times[2:]):.3f} |", flush=True)


if __name__ == "__main__":
    main()
