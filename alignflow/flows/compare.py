"""The `compare` flow: several variants of one stage (methods' settings, or a small grid of hyperparameters)
trained from the same inputs **at the same time** on the cluster, each measured by the recipe's `evaluate`
stage, ending in one comparison artifact (a table, the metric as bars and the training curves side by side);
optionally the winner becomes a round-based run's policy.

    prefect deployment run 'compare/tiny-dpo-lr'

Each variant is two stages (train, then evaluate) run as Prefect tasks concurrently with the other
variants; each task is a Ray job whose ranks hold their own resources, so variants overlap as far as the
cluster has room and queue on Ray for the rest. Every stage is cached by identity, so a rerun runs only
the variants whose settings changed.
"""

from __future__ import annotations

from typing import Any, Literal

from prefect import get_run_logger

from alignflow.tasks.orchestration.evaluate import evaluate_step, read_evaluation
from alignflow.tasks.orchestration.flow_run import Ending, FlowRun, Pipeline, Results, run_pipeline
from alignflow.tasks.orchestration.params import EvaluateOverrides, MetricName, checked_flow, overrides
from alignflow.tasks.orchestration.pipeline import Output, Step
from alignflow.tasks.orchestration.policy_pointer import advance, read_pointer
from alignflow.tasks.orchestration.stage_spec import check_store
from alignflow.tasks.presentation.comparison import Entry, publish_comparison, winner
from alignment.config import ConfigError

TRAINED = Literal["sft", "rm", "dpo", "kto", "ppo", "kd", "opd"]


def variant_steps(stage: str, shared: dict, variants: dict[str, dict], evaluate: dict) -> list[Step]:
    """Per variant: its stage (the recipe's `<stage>.yaml` < `shared` < the variant's own settings), then
    the evaluation of its model."""
    steps = []
    for name, settings in variants.items():
        steps += [Step(name, stage, stage, {**shared, **settings}), evaluate_step(name, Output(name), evaluate)]
    return steps


def _comparison(entries: list[Entry], metric: str) -> dict[str, Any]:
    """The flow's return value: the winner on `metric` and each variant's model, metrics and settings."""
    return {
        "winner": winner(entries, metric).name,
        "variants": {
            e.name: {
                "model_uri": e.result.model_uri,
                "skipped": e.result.skipped,
                "metrics": e.evaluation["metrics"],
                "settings": e.settings,
            }
            for e in entries
        },
    }


@checked_flow(name="compare")
async def compare_flow(
    variants: dict[str, dict[str, Any]],
    stage: TRAINED = "dpo",
    run_name: str = "compare",
    store: str = "runs/store",
    ray_address: str | None = None,
    recipe: str | None = None,
    shared: dict[str, Any] | None = None,
    evaluate: EvaluateOverrides | None = None,
    metric: MetricName = "accuracy",
    promote_to: str | None = None,
    retries: int = 2,
) -> dict[str, Any]:
    """`variants`: {name: the stage's settings that differ}, e.g. {"lr-1e-5": {"learning_rate": 1e-5}, ...};
    `shared`: settings every variant gets (e.g. `pretrain`, a model URI). Returns each variant's metrics and
    model URI, and the winner on `metric`. `promote_to`: a round-based run (iterative DPO, rejection sampling)
    in the same store whose policy the winner becomes."""
    if len(variants) < 2:
        raise ConfigError(f"compare: variants has {len(variants)}; give two or more ({{name: settings}})")
    entries: list[Entry] = []

    async def finish(results: Results) -> Ending:
        """The winner on `metric`, promoted where asked, and the comparison artifact."""
        entries.extend(
            Entry(name, variants[name], results[name], read_evaluation(results[f"evaluate {name}"].model_uri))
            for name in variants
        )
        best = winner(entries, metric)
        notes = [f"winner on {metric}: {best.name} ({best.evaluation['metrics'][metric]:.4g})"]
        if promote_to:
            where = check_store(store)
            pointer = advance(
                where,
                promote_to,
                read_pointer(where, promote_to),
                best.result.model_uri,
                {"compare": run_name, "variant": best.name, "evaluation": best.evaluation["metrics"]},
            )
            notes.append(f"promoted {best.name} to run {promote_to}'s policy (round {pointer.round})")
        get_run_logger().info("; ".join(notes))
        await publish_comparison(run_name, stage, metric, entries)
        return Ending(notes)

    steps = variant_steps(stage, dict(shared or {}), variants, overrides(evaluate))
    pipe = Pipeline(
        lambda _: steps,
        finish=finish,
        # each variant's train and evaluate steps in order, the variants at the same time: each is a Ray job
        # whose ranks hold their own resources, so they overlap as far as the cluster has room
        lanes=[[name, f"evaluate {name}"] for name in variants],
    )
    await run_pipeline(FlowRun("compare", run_name, store, recipe, ray_address, retries), pipe)
    return _comparison(entries, metric)
