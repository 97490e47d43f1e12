"""--use_dynamic_batch against fixed micro-batches: seconds of the PPO family's log-prob pass and of
one actor training step on one rank, with and without --packing_samples, on rows whose response
lengths vary as sampled ones do (a few long, most short). A benchmark, not a test.

The model has SmolLM2-135M's shape (30 layers, width 576, vocabulary 49152) with random weights:
timing needs its size, not its knowledge, and no download. Both cuts get the same rows, and the
log-probs of both are compared (max |difference| is printed).

Usage: .venv/bin/python benchmarks/dynamic_batch.py [--rows 32] [--micro 8] [--budget 2048] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DS_ACCELERATOR", "cpu")


def lengths(rows: int, seed: int) -> list[tuple[int, int]]:
    """(prompt, response) lengths: prompts 32..96 tokens, responses log-normal around 40, at most 256."""
    import random

    rng = random.Random(seed)
    return [(rng.randint(32, 96), max(4, min(256, int(rng.lognormvariate(3.7, 0.9))))) for _ in range(rows)]


def model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(cfg)


def timed(fn, repeats: int) -> float:
    fn()  # warm-up: allocator, kernels
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--micro", type=int, default=8, help="--micro_train_batch_size / --micro_rollout_batch_size")
    ap.add_argument("--budget", type=int, default=2048, help="--train_max_tokens_per_gpu")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", type=Path)
    return ap.parse_args(argv)


@dataclasses.dataclass
class Bench:
    """What both cuts share: the rows, the model and its engine, the fixed and the dynamic config."""

    args: argparse.Namespace
    total: list[int]  # prompt + response tokens of each row
    batch: Any
    net: Any
    engine: Any
    fixed: Any
    dynamic: Any


def set_up(args: argparse.Namespace) -> Bench:
    import deepspeed
    import torch

    from alignment.config.ppo import PPOConfig
    from tests.test_ppo_packing import batch_of

    shape = lengths(args.rows, seed=0)
    fixed = dataclasses.replace(
        PPOConfig(),
        prompt_max_len=96,
        generate_max_len=256,
        max_epochs=1,
        micro_train_batch_size=args.micro,
        micro_rollout_batch_size=args.micro,
        train_batch_size=args.rows,
    )
    dynamic = dataclasses.replace(fixed, use_dynamic_batch=True, train_max_tokens_per_gpu=args.budget)
    net = model()
    ds = {
        "train_batch_size": args.rows,
        "train_micro_batch_size_per_gpu": args.micro,
        "gradient_accumulation_steps": args.rows // args.micro,
        "zero_optimization": {"stage": 0},
        "steps_per_print": 10**9,
    }
    engine, *_ = deepspeed.initialize(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.0), config=ds)
    total = [p + r for p, r in shape]
    return Bench(args, total, batch_of(shape, vocab=49152), net, engine, fixed, dynamic)


def measure(b: Bench, packing: Any) -> dict[str, Any]:
    """Tokens computed, the log-prob pass's and a training step's seconds, fixed vs dynamic, and their log-probs'
    largest difference: one row of the results, padded (packing None) or packed."""
    import torch

    from alignment.ppo import rank_ops
    from alignment.ppo.experience import Experience
    from alignment.ppo.token_budget import TokenBudget

    micro, total = b.args.micro, b.total
    cost = TokenBudget(10**12, packing is not None).cost
    fixed_tokens = sum(cost(total[s : s + micro]) for s in range(0, len(total), micro))
    dyn_tokens = sum(cost([total[i] for i in g]) for g in TokenBudget(b.args.budget, packing is not None).groups(total))
    row: dict[str, Any] = {"tokens_computed": {"fixed": fixed_tokens, "dynamic": dyn_tokens}}
    want = rank_ops.logprobs(b.net, b.batch, b.fixed, packing)
    got = rank_ops.logprobs(b.net, b.batch, b.dynamic, packing)
    row["max_abs_logprob_diff"] = (want - got).abs().max().item()
    zeros = torch.zeros(want.shape)
    advantages = torch.randn(want.shape) * b.batch.action_mask
    exp = Experience(b.batch, want, None, None, advantages, zeros, torch.zeros(b.args.rows), zeros)
    for cut, cfg in (("fixed", b.fixed), ("dynamic", b.dynamic)):
        row[f"logprob_s_{cut}"] = timed(lambda: rank_ops.logprobs(b.net, b.batch, cfg, packing), b.args.repeats)
        row[f"train_step_s_{cut}"] = timed(
            lambda: rank_ops.train_actor(b.engine, exp, cfg, 0.0, 0, packing), b.args.repeats
        )
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch
    import torch.distributed as dist

    from alignment.ppo.packed import Packing

    torch.set_num_threads(args.threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29731", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("gloo", rank=0, world_size=1)
    b = set_up(args)
    total = b.total
    print(
        f"{args.rows} rows, prompt+response tokens: min {min(total)}, median {int(statistics.median(total))}, "
        f"max {max(total)}; micro-batches of {args.micro} rows vs <= {args.budget} tokens; {args.threads} threads"
    )
    results = {}
    for packing in (None, Packing(torch.bool)):
        name = "packed" if packing else "padded"
        row = results[name] = measure(b, packing)
        tokens = row["tokens_computed"]
        print(
            f"{name}: tokens computed {tokens['fixed']} -> {tokens['dynamic']}; log-prob pass "
            f"{row['logprob_s_fixed']:.2f} s -> {row['logprob_s_dynamic']:.2f} s "
            f"({row['logprob_s_fixed'] / row['logprob_s_dynamic']:.2f}x); training step "
            f"{row['train_step_s_fixed']:.2f} s -> {row['train_step_s_dynamic']:.2f} s "
            f"({row['train_step_s_fixed'] / row['train_step_s_dynamic']:.2f}x); max |log-prob diff| "
            f"{row['max_abs_logprob_diff']:.1e}"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=1)
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
