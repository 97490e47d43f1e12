"""The `sft` flow: one SFT stage (plus the tiny world's random-init base when its recipe has one and
no model is given).

    prefect deployment run 'sft/tiny' --param sft='{"max_steps": 200}'

Parameters: the recipe (a folder of stage YAMLs, tasks/recipes.py; none: the schema's defaults),
`sft` overrides (any SFT flag name), the store URI, the Ray address, the run name.
"""

from typing import Any

from alignflow.tasks.flow_run import FlowRun, run_stages
from alignflow.tasks.params import SFTOverrides, checked_flow
from alignflow.tasks.params import overrides as plain
from alignflow.tasks.pipeline import Output, Step
from alignflow.tasks.recipes import Recipe


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


def sft_steps(recipe: Recipe, sft: dict[str, Any]) -> list[Step]:
    """[tiny_base,] sft: the SFT stage, after the tiny world's base when the recipe makes one (`makes_base`)."""
    if makes_base(recipe, sft):
        return [
            Step("tiny_base", "tiny_base", "tiny_base"),
            Step("sft", "sft", "sft", sft, {"pretrain": Output("tiny_base")}),
        ]
    return [Step("sft", "sft", "sft", sft)]


def makes_base(recipe: Recipe, sft: dict[str, Any]) -> bool:
    """The recipe makes its own base model (`tiny_base.yaml`) and neither it nor the run gives SFT a `pretrain`."""
    return recipe.has("tiny_base") and not given_pretrain(recipe, sft)


def given_pretrain(recipe: Recipe, sft: dict[str, Any]) -> str | None:
    """The model SFT starts from as the run's `sft` parameters or the recipe's sft.yaml give it, if they do."""
    from alignment.config import SFTConfig, load_yaml

    sft_file = recipe.file("sft")
    return sft.get("pretrain") or (sft_file and load_yaml(SFTConfig, sft_file).get("pretrain")) or None
