"""The `sft` flow: one SFT stage (plus the tiny world's random-init base when its recipe has one and
no model is given).

    prefect deployment run 'sft/tiny' --param sft='{"max_steps": 200}'

Parameters: the recipe (a folder of stage YAMLs, alignflow/tasks/recipes.py; none: the schema's defaults),
`sft` overrides (any SFT flag name), the store URI, the Ray address, the run name.
"""

import time
from typing import Any

from alignflow.tasks.params import SFTOverrides, checked_flow, overrides as plain
from alignflow.tasks import pipeline
from alignflow.tasks.pipeline import Output, Step
from alignflow.tasks.ray_cluster import ray_cluster
from alignflow.tasks.recipes import Recipe, load_recipe
from alignflow.tasks.report import build_report, publish_report
from alignflow.tasks.stage import stage_runner
from alignflow.tasks.stage_spec import check_store, check_store_reachable


@checked_flow(name="sft")
async def sft_flow(run_name: str = "sft", store: str = "runs/store", ray_address: str | None = None,
                   recipe: str | None = None, sft: SFTOverrides | None = None, retries: int = 2) -> dict[str, Any]:
    """SFT as a Ray job. `recipe`: a shipped recipe's name (`tiny`, `smollm2`, ...) or your folder."""
    started = time.monotonic()
    # Everything that can be wrong with the parameters fails here, before a cluster starts.
    store = check_store_reachable(check_store(store))
    recipe_ = load_recipe(recipe)
    overrides = plain(sft)
    steps = [Step("sft", "sft", "sft", overrides)]
    if makes_base(recipe_, overrides):
        steps = [Step("tiny_base", "tiny_base", "tiny_base"),
                 Step("sft", "sft", "sft", overrides, {"pretrain": Output("tiny_base")})]
    planned = pipeline.plan(steps, recipe_, store, run_name)
    await pipeline.publish_configs("sft", run_name, recipe_, planned)
    with ray_cluster(ray_address) as cluster:
        stages = {name: r async for name, r in pipeline.run(planned, stage_runner(retries), store, run_name, cluster)}
    report = build_report("sft", run_name, {k: r.summary() for k, r in stages.items()}, time.monotonic() - started)
    await publish_report(report)
    return stages["sft"].summary()


def makes_base(recipe: Recipe, sft: dict[str, Any]) -> bool:
    """The recipe makes its own base model (`tiny_base.yaml`) and neither it nor the run gives SFT a `pretrain`."""
    from alignment.config import SFTConfig, load_yaml

    sft_file = recipe.file("sft")
    given = sft.get("pretrain") or (sft_file and load_yaml(SFTConfig, sft_file).get("pretrain"))
    return recipe.has("tiny_base") and not given
