"""What every stage-list flow does around its steps, written once: check the store, load the recipe, plan and
validate every stage before a cluster starts, publish the configs, run the plan on the cluster, evaluate the
named stages' models on the held-out set, and end with the report artifact."""

from __future__ import annotations

import time
from typing import Any, Callable

from alignflow.tasks import pipeline
from alignflow.tasks.evaluate import evaluate_step, publish_evaluation, read_evaluation
from alignflow.tasks.pipeline import Output, Step
from alignflow.tasks.ray_cluster import ray_cluster
from alignflow.tasks.recipes import Recipe, load_recipe
from alignflow.tasks.report import build_report, publish_report
from alignflow.tasks.stage import stage_runner
from alignflow.tasks.stage_spec import absolute_input, check_store, check_store_reachable


async def run_stages(
    flow: str,
    run_name: str,
    store: str,
    recipe: str | None,
    steps: Callable[[Recipe], list[Step]],
    ray_address: str | None,
    retries: int,
    heldout: tuple[str, ...] = (),
    heldout_others: dict[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Each stage's summary (model URI, skipped or trained, final metrics, wall time). `heldout` names steps
    whose models the recipe's `evaluate.yaml` measures, and `heldout_others` ({label: model}) models the run
    did not make (a distillation's teacher): each is an `evaluate` stage of the plan, and its result is
    also under the measured step's "heldout"."""
    started = time.monotonic()
    store = check_store_reachable(check_store(store))
    recipe_ = load_recipe(recipe)
    others = {label: absolute_input(model) for label, model in (heldout_others or {}).items()}
    evaluations = [evaluate_step(name, Output(name)) for name in heldout]
    evaluations += [evaluate_step(label, model) for label, model in others.items()]
    planned = pipeline.plan(steps(recipe_) + evaluations, recipe_, store, run_name)
    await pipeline.publish_configs(flow, run_name, recipe_, planned)
    with ray_cluster(ray_address) as cluster:  # a stage already committed asks nothing of the cluster
        results = {name: r async for name, r in pipeline.run(planned, stage_runner(retries), store, run_name, cluster)}
    summaries = {name: r.summary() for name, r in results.items()}
    for label in (*heldout, *others):
        result = read_evaluation(results[f"evaluate {label}"].model_uri)
        await publish_evaluation(label, result, run_name)
        if label in others:
            summaries = {
                label: {
                    "stage": "given",
                    "model_uri": others[label],
                    "stage_wall_s": 0.0,
                    "skipped": True,
                    "heldout": result,
                },
                **summaries,
            }
        else:
            summaries[label]["heldout"] = result
    await publish_report(build_report(flow, run_name, summaries, time.monotonic() - started))
    return summaries
