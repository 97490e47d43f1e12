"""What every stage-list flow does around its steps, written once: check the store, load the recipe, plan and
validate every stage before a cluster starts, publish the configs, run the plan on the cluster, evaluate the
named stages' models on the held-out set, and end with the report artifact."""
from __future__ import annotations

import hashlib
import time
from typing import Any, Callable

from alignflow.tasks import pipeline
from alignflow.tasks.evaluate import evaluate_heldout
from alignflow.tasks.pipeline import Step
from alignflow.tasks.ray_cluster import ray_cluster
from alignflow.tasks.recipes import Recipe, load_recipe
from alignflow.tasks.report import build_report, publish_report
from alignflow.tasks.stage import stage_runner
from alignflow.tasks.stage_spec import absolute_input, check_store, check_store_reachable


async def run_stages(flow: str, run_name: str, store: str, recipe: str | None, steps: Callable[[Recipe], list[Step]],
                     ray_address: str | None, retries: int, heldout: tuple[str, ...] = (),
                     heldout_others: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Each stage's summary (model URI, skipped or trained, final metrics, wall time), with `heldout`'s stages'
    held-out accuracy under "heldout"; `heldout_others` ({label: model}) are models the run did not make (a
    distillation's teacher), measured too, their results saved in the run's folder of the store."""
    started = time.monotonic()
    store = check_store_reachable(check_store(store))
    recipe_ = load_recipe(recipe)
    planned = pipeline.plan(steps(recipe_), recipe_, store, run_name)
    await pipeline.publish_configs(flow, run_name, recipe_, planned)
    with ray_cluster(ray_address) as cluster:
        results = {name: r async for name, r in pipeline.run(planned, stage_runner(retries), store, run_name, cluster)}
        summaries = {name: r.summary() for name, r in results.items()}
        for name in heldout:
            # the cluster, not its address: a saved evaluation needs no Ray head
            summaries[name]["heldout"] = await evaluate_heldout(name, results[name].model_uri, run_name, cluster)
        for label, model in (heldout_others or {}).items():
            model = absolute_input(model)
            at = f"{store}/{run_name}/eval-{label}-{hashlib.sha256(model.encode()).hexdigest()[:8]}/heldout_arithmetic.json"
            summaries = {label: {"stage": "given", "model_uri": model, "stage_wall_s": 0.0, "skipped": True,
                                 "heldout": await evaluate_heldout(label, model, run_name, cluster, at)}, **summaries}
    await publish_report(build_report(flow, run_name, summaries, time.monotonic() - started))
    return summaries
