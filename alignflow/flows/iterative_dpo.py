"""The `iterative-dpo` flow: rounds of generate best-of-n with the current policy → score →
best/worst pairs (batch_inference with the iter_dpo post-processor) → DPO from the current
policy, which is also the reference → commit → advance the policy pointer.

    prefect deployment run 'iterative-dpo/nightly'

Each run continues from "the latest policy" recorded in the store (`tasks.policy_pointer`),
so scheduled runs pick up where the previous one stopped; the pointer moves only after a round's
model is committed, so a failed round is redone from the same policy next time. The first round
starts from `initial_policy` (a model directory or store URI, e.g. an SFT stage's output).
"""

from dataclasses import asdict
from typing import Any

from alignflow.tasks.orchestration.params import DPOOverrides, EvaluateOverrides, Gate, GenerateOverrides, checked_flow
from alignflow.tasks.orchestration.policy_rounds import policy_rounds


@checked_flow(name="iterative-dpo")
async def iterative_dpo_flow(
    run_name: str = "iterative-dpo",
    store: str = "runs/store",
    ray_address: str | None = None,
    initial_policy: str | None = None,
    rounds: int = 1,
    recipe: str | None = None,
    generate: GenerateOverrides | None = None,
    dpo: DPOOverrides | None = None,
    retries: int = 2,
    restart: bool = False,
    gate: Gate | None = None,
    evaluate: EvaluateOverrides | None = None,
) -> dict[str, Any]:
    """Runs `rounds` rounds (the recipe's `generate.yaml` and `dpo.yaml` configure them, e.g.
    `recipe="tiny-idpo"`); returns the policy pointer (round, model URI, history). `restart`: start
    again from `initial_policy` although the run already has a policy. `gate`: promote a round's model
    only if the recipe's evaluate stage (with `evaluate`'s overrides) finds it better than the current policy."""
    params = {k: v for k, v in locals().items() if k != "dpo"}  # this flow's parameters, as given
    return asdict(await policy_rounds(flow_name="iterative-dpo", train_stage="dpo", train=dpo, **params))
