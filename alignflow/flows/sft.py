"""The `sft` flow: one SFT stage (plus the tiny world's random-init base when its recipe has one and
no model is given).

    prefect deployment run 'sft/tiny' --param sft='{"max_steps": 200}'

Parameters: the recipe (a folder of stage YAMLs, alignflow/tasks/orchestration/recipes.py; none: the schema's defaults),
`sft` overrides (any SFT flag name), the store URI, the Ray address, the run name.
"""

from typing import Any

from alignflow.tasks.orchestration.flow_run import FlowRun, run_stages
from alignflow.tasks.orchestration.flow_steps import sft_steps
from alignflow.tasks.orchestration.params import SFTOverrides, checked_flow
from alignflow.tasks.orchestration.params import overrides as plain


@checked_flow(name="sft")
async def sft_flow(
    run_name: str = "sft",
    store: str = "runs/store",
    ray_address: str | None = None,
    recipe: str | None = None,
    sft: SFTOverrides | None = None,
    retries: int = 2,
) -> dict[str, Any]:
    """SFT as a Ray job. `recipe`: a shipped recipe's name (`tiny`, `smollm2`, ...) or your folder."""
    steps = lambda recipe_: sft_steps(recipe_, plain(sft))  # noqa: E731
    return (await run_stages(FlowRun("sft", run_name, store, recipe, ray_address, retries), steps))["sft"]
