"""What every flow does around its steps, written once (`run_pipeline`): check the store, load the recipe,
plan and validate every stage before a cluster starts, publish the configs, run the plan on the cluster,
evaluate the named stages' models on the held-out set, and end with the report artifact.

A flow is its parameters (`FlowRun`) and a `Pipeline`: the step list, and where it needs them, hooks: `then`
(after the steps planned so far have run: the next steps, planned then, or none: how rounds are written,
since a round's policy is known only when the round before it has been decided), `finish` (what the flow
decided, for the report) and `lanes` (steps run at the same time: a comparison's variants).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from alignflow.tasks.cluster.ray_cluster import Cluster, ray_cluster
from alignflow.tasks.orchestration import pipeline
from alignflow.tasks.orchestration.evaluate import evaluate_step, publish_evaluation, publish_pictures, read_evaluation
from alignflow.tasks.orchestration.pipeline import Output, Planned, Step
from alignflow.tasks.orchestration.recipes import Recipe, load_recipe
from alignflow.tasks.orchestration.sigterm import sigterm_cancels_this_task
from alignflow.tasks.orchestration.stage import stage_runner
from alignflow.tasks.orchestration.stage_spec import absolute_input, check_store, check_store_reachable
from alignflow.tasks.presentation.curves import Panel
from alignflow.tasks.presentation.report import build_report, publish_report
from alignflow.tasks.presentation.results import StageResult

Results = dict[str, StageResult]


@dataclass(frozen=True)
class FlowRun:
    """The parameters every flow has: which flow, the run's name, where it commits, its recipe, its cluster."""

    flow: str
    run_name: str
    store: str
    recipe: str | None
    ray_address: str | None
    retries: int


@dataclass
class Ending:
    """What a flow decided once its steps ran: the report's notes and charts, and evaluations it read itself
    ({step: evaluation}, shown under that step like `heldout`'s)."""

    notes: list[str] = field(default_factory=list)
    charts: dict[str, list[Panel]] = field(default_factory=dict)
    heldout: dict[str, dict] = field(default_factory=dict)


@dataclass
class Pipeline:
    """What a flow runs. `heldout` names steps whose models the recipe's `evaluate.yaml` measures, and
    `heldout_others` ({label: model}) models the run did not make (a distillation's teacher): each is an
    `evaluate` step of the plan."""

    steps: Callable[[Recipe], list[Step]]
    heldout: tuple[str, ...] = ()
    heldout_others: dict[str, str] = field(default_factory=dict)
    then: Callable[[Results], Awaitable[list[Step]]] | None = None
    finish: Callable[[Results], Awaitable[Ending]] | None = None
    lanes: list[list[str]] | None = None  # step names run at the same time, lane by lane (the first plan only)


@dataclass
class Ran:
    results: Results  # every step's, in the order they committed
    summaries: dict[str, dict[str, Any]]  # what the flow returns per step (with "heldout" where measured)


async def run_pipeline(run: FlowRun, pipe: Pipeline) -> Ran:
    async with sigterm_cancels_this_task():  # a `kill` stops the flow at an await, the running stage's job with it
        return await _run(run, pipe)


async def _run(run: FlowRun, pipe: Pipeline) -> Ran:
    started = time.monotonic()
    store = check_store_reachable(check_store(run.store))
    recipe = load_recipe(run.recipe)
    others = {label: absolute_input(model) for label, model in pipe.heldout_others.items()}
    evaluations = [evaluate_step(name, Output(name)) for name in pipe.heldout]
    evaluations += [evaluate_step(label, model) for label, model in others.items()]
    planned = pipeline.plan(pipe.steps(recipe) + evaluations, recipe, store, run.run_name)
    await pipeline.publish_configs(run.flow, run.run_name, recipe, planned)
    results: Results = {}
    with ray_cluster(run.ray_address) as cluster:  # a stage already committed asks nothing of the cluster
        todo = planned
        while todo:
            if pipe.lanes and not results:  # the first plan: each lane in order, the lanes at the same time
                done = await asyncio.gather(
                    *(_in_order({n: todo[n] for n in ln}, run, store, cluster) for ln in pipe.lanes)
                )
                results |= {name: r for part in done for name, r in part.items()}
            else:
                results |= await _in_order(todo, run, store, cluster)
            more = await pipe.then(results) if pipe.then else []
            todo = pipeline.plan(more, recipe, store, run.run_name, planned) if more else {}
            if todo:
                planned |= todo
                await pipeline.publish_configs(run.flow, run.run_name, recipe, planned)
    ending = await pipe.finish(results) if pipe.finish else Ending()
    summaries = await _summaries(results, pipe.heldout, others, ending.heldout, run.run_name)
    report = build_report(
        run.flow, run.run_name, summaries, time.monotonic() - started, ending.notes, concurrent=pipe.lanes is not None
    )
    await publish_report(report, ending.charts)
    return Ran(results, summaries)


async def _in_order(planned: dict[str, Planned], run: FlowRun, store: str, cluster: Cluster) -> Results:
    runner = stage_runner(run.retries)
    return {name: r async for name, r in pipeline.run(planned, runner, store, run.run_name, cluster)}


async def _summaries(
    results: Results, heldout: tuple[str, ...], others: dict[str, str], read: dict[str, dict], run_name: str
) -> dict[str, dict[str, Any]]:
    """Each step's summary; the measured ones with their evaluation under "heldout" (published as a table), a
    given model's (not a step of this run) as a row of its own, first."""
    summaries = {name: r.summary() for name, r in results.items()}
    given = {}
    for label in (*heldout, *others):
        result = read_evaluation(results[f"evaluate {label}"].model_uri)
        await publish_evaluation(label, result, run_name)
        if label in others:
            given[label] = {
                "stage": "given",
                "model_uri": others[label],
                "stage_wall_s": 0.0,
                "skipped": True,
                "heldout": result,
            }
        else:
            summaries[label]["heldout"] = result
    for label, result in read.items():
        summaries[label]["heldout"] = result
    measured = {label: s["heldout"] for label, s in (given | summaries).items() if "heldout" in s}
    await publish_pictures(run_name, measured)  # a vision-language run: its pictures with each model's answers
    return given | summaries


async def run_stages(
    run: FlowRun,
    steps: Callable[[Recipe], list[Step]],
    heldout: tuple[str, ...] = (),
    heldout_others: dict[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """A flow that is only a step list (and its held-out evaluations): each step's summary."""
    return (await run_pipeline(run, Pipeline(steps, heldout, heldout_others or {}))).summaries
