"""The comparisons the TRL benchmark makes and their sizes (full, tiny): per workload the run both
sides train, the unit, the goal and the sentence the report prints about it."""

from __future__ import annotations

from dataclasses import dataclass, replace

from benchmarks.compare.placement import placement_comparison
from benchmarks.compare.spec import RunSpec
from benchmarks.compare.workloads import REPO, Comparison, Context, orchestration_sides, ours_side, trl_side


@dataclass
class Sizes:
    """Steps and batch sizes of one benchmark size."""

    sft_steps: int
    pair_steps: int
    rl_iterations: int
    rl_prompts: int
    n_samples: int
    orch_steps: int
    with_vllm: bool = True


FULL = Sizes(sft_steps=30, pair_steps=15, rl_iterations=5, rl_prompts=16, n_samples=8, orch_steps=1200)
TINY = Sizes(sft_steps=4, pair_steps=4, rl_iterations=3, rl_prompts=4, n_samples=4, orch_steps=4)


def run_specs(model: str, sizes: Sizes, threads: int, device: str = "cpu", bf16: bool = False) -> dict[str, RunSpec]:
    """The RunSpec of each trainer workload (out_dir left empty: each run gets its own), by kind."""
    data = REPO / "data" / "tiny"
    common = dict(model=model, out_dir="", threads=threads, max_len=64, device=device, bf16=bf16)
    sft = RunSpec("sft", data=str(data / "sft"), steps=sizes.sft_steps, batch=32, micro=32, lr=2e-4, **common)
    rm = RunSpec("rm", data=str(data / "preference"), steps=sizes.pair_steps, batch=32, micro=16, lr=1e-4, **common)
    rl = dict(
        data=str(data / "prompts"),
        steps=sizes.rl_iterations,
        batch=sizes.rl_prompts * sizes.n_samples,
        micro=16,
        lr=3e-5,
        n_samples=sizes.n_samples,
        gen_len=16,
        **common,
    )
    return {
        "sft": sft,
        "rm": rm,
        "dpo": replace(rm, kind="dpo", lr=5e-6, beta=0.1),
        "rloo": RunSpec("rloo", **rl),
        "grpo": RunSpec("grpo", **rl),
    }


def comparisons(ctx: Context, model: str, demo_base: str, sizes: Sizes) -> list[Comparison]:
    specs = run_specs(model, sizes, ctx.threads, ctx.device, ctx.bf16)
    return [
        *offline_comparisons(ctx, specs),
        *rl_comparisons(ctx, specs, sizes),
        Comparison(
            "orchestration",
            "Orchestration: SFT stage",
            "s (wall)",
            False,
            orchestration_sides(ctx, demo_base, sizes.orch_steps),
            "overhead ≤ 5 %",
            1.05,
            f"the demo's SFT stage (tiny model, deployments/recipes/tiny/sft.yaml, {sizes.orch_steps} steps); "
            "bare CLI: the whole command; through the flow: the stage task, and the whole flow command",
            baseline="bare CLI",
        ),
        placement_comparison(ctx, demo_base, sizes.orch_steps),
    ]


def offline_comparisons(ctx: Context, specs: dict[str, RunSpec]) -> list[Comparison]:
    sft, rm, dpo = (specs[k] for k in ("sft", "rm", "dpo"))
    return [
        Comparison(
            "sft",
            "SFT (packing)",
            "tokens/s",
            True,
            [ours_side(ctx, sft), trl_side(ctx, sft)],
            "≥ 1.3× TRL",
            1.3,
            f"{sft.steps} steps of 32 samples (TRL: 16 packed rows of ≤ 64 tokens), lr 2e-4",
        ),
        Comparison(
            "rm",
            "Reward model",
            "pairs/s",
            True,
            [ours_side(ctx, rm), trl_side(ctx, rm)],
            "≥ 1.2× TRL",
            1.2,
            f"{rm.steps} steps of 32 pairs (micro-batch 16), lr 1e-4",
        ),
        Comparison(
            "dpo",
            "DPO",
            "pairs/s",
            True,
            [ours_side(ctx, dpo), trl_side(ctx, dpo)],
            "≥ 1.3× TRL",
            1.3,
            f"{dpo.steps} steps of 32 pairs (micro-batch 16), beta 0.1, lr 5e-6, "
            "frozen reference forward every step on both sides",
        ),
    ]


def rl_comparisons(ctx: Context, specs: dict[str, RunSpec], sizes: Sizes) -> list[Comparison]:
    """RLOO and GRPO iterations; GRPO also on a vLLM engine, synchronous and overlapped, unless --no-vllm."""
    rloo, grpo = specs["rloo"], specs["grpo"]
    rl_text = (
        f"{sizes.rl_prompts} prompts x {sizes.n_samples} samples, ≤ 16 new tokens, temperature 1, one optimizer "
        f"step on all {rloo.batch} samples (micro-batch 16), lr 3e-5, no KL (ours --init_kl_coef 0, TRL beta 0); "
        "ours --packing_samples (a prompt's samples share its forward)"
    )
    grpo_sides = [ours_side(ctx, grpo, label="ours (HF generate)")]
    if sizes.with_vllm:
        grpo_sides.append(ours_side(ctx, grpo, vllm=True, label="ours (vLLM engine)"))
        grpo_sides.append(ours_side(ctx, grpo, vllm=True, overlap=True, label="ours (async vLLM engine)"))
    grpo_sides.append(trl_side(ctx, grpo))
    grpo_skipped = (
        {}
        if sizes.with_vllm
        else {"ours (vLLM engine)": "not run (--no-vllm)", "ours (async vLLM engine)": "not run (--no-vllm)"}
    )
    return [
        Comparison(
            "rloo",
            "RL iteration: RLOO",
            "s/iteration",
            False,
            [ours_side(ctx, rloo), trl_side(ctx, rloo)],
            "≤ 0.7× TRL",
            0.7,
            f"{rloo.steps} iterations; " + rl_text,
        ),
        Comparison(
            "grpo",
            "RL iteration: GRPO",
            "s/iteration",
            False,
            grpo_sides,
            "≤ 0.7× TRL",
            0.7,
            f"{grpo.steps} iterations; " + rl_text + "; the vLLM engine: train_ppo_ray, "
            "one engine on one core, actor + reference on the other; --async_train (its own goal: ≤ 0.55× TRL) "
            "generates the next iteration there while this one trains",
            skipped=grpo_skipped,
        ),
    ]
