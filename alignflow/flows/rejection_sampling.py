"""The `rejection-sampling` flow: rounds of generate best-of-n with the current policy → score →
keep the best response per prompt (batch_inference with the rs post-processor) → SFT of the
current policy on the kept samples → commit → advance the policy pointer.

    prefect deployment run 'rejection-sampling/tiny' --param initial_policy=<SFT model> --param rounds=2

Like iterative-dpo, a run continues from the latest committed policy of its `run_name` in the
store, and a failed round leaves the pointer where it was.
"""

from dataclasses import asdict
from typing import Any

from alignflow.tasks.orchestration.params import EvaluateOverrides, Gate, GenerateOverrides, SFTOverrides, checked_flow
from alignflow.tasks.orchestration.policy_rounds import policy_rounds


@checked_flow(name="rejection-sampling")
async def rejection_sampling_flow(
    run_name: str = "rejection-sampling",
    store: str = "runs/store",
    ray_address: str | None = None,
    initial_policy: str | None = None,
    rounds: int = 1,
    recipe: str | None = None,
    generate: GenerateOverrides | None = None,
    sft: SFTOverrides | None = None,
    retries: int = 2,
    restart: bool = False,
    gate: Gate | None = None,
    evaluate: EvaluateOverrides | None = None,
) -> dict[str, Any]:
    """Runs `rounds` rounds (the recipe's `generate.yaml` and `sft.yaml` configure them, e.g.
    `recipe="tiny-rs"`); returns the policy pointer (round, model URI, history). `restart`: start
    again from `initial_policy` although the run already has a policy. `gate`: promote a round's model
    only if the recipe's evaluate stage (with `evaluate`'s overrides) finds it better than the current policy."""
    params = {k: v for k, v in locals().items() if k != "sft"}  # this flow's parameters, as given
    return asdict(await policy_rounds(flow_name="rejection-sampling", train_stage="sft", train=sft, **params))
