"""A flow as data: a list of stages (`Step`s) whose inputs name upstream stages' outputs (`Output`),
planned as a whole before a cluster starts, then run in order.

Planning needs no placeholders: a stage's output folder is `<store>/<run>/<stage>-<identity>/model`
and its identity is a hash of its config and its input URIs (alignflow/tasks/orchestration/stage_spec.py), so the URI of
every upstream output is known before anything runs. Each stage's config is therefore merged and
validated with the very URIs it will get, and the `configs` artifact shows them. The run then
passes each stage the same inputs and checks that it committed where the plan said.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable

import yaml
from prefect.artifacts import acreate_markdown_artifact

from alignflow.tasks.orchestration.recipes import Recipe
from alignflow.tasks.orchestration.stage_spec import STAGES, build_config, config_summary, identity_hash, stage_dir
from alignflow.tasks.presentation.artifacts import artifact_key
from alignflow.tasks.presentation.results import StageResult
from alignment import storage
from alignment.config import ConfigError
from alignment.config.stages import StageConfig

if TYPE_CHECKING:
    from alignflow.tasks.cluster.ray_cluster import Cluster


@dataclass(frozen=True)
class Output:
    """An upstream step's committed output folder (or `file` inside it) as an input."""

    step: str
    file: str | None = None


@dataclass(frozen=True)
class Step:
    name: str  # unique in the pipeline: the report's and the configs artifact's row
    stage: str  # what runs (tasks.stage_spec.STAGES)
    role: str  # the recipe file configuring it: <role>.yaml
    overrides: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, str | Output] = field(default_factory=dict)  # config field -> URI or upstream output


@dataclass(frozen=True)
class Planned:
    """A step as it will run: the stage task gets this config and identity and builds neither again."""

    step: Step
    config_file: str | None
    cfg: StageConfig  # merged and validated
    inputs: dict[str, str]  # every input as a URI
    digest: str  # the stage's identity: a hash of its config and inputs
    out: str  # the stage's folder in the store: <store>/<run>/<stage>-<digest>

    @property
    def model_uri(self) -> str:  # where the stage commits
        return f"{self.out}/model"


def plan(
    steps: list[Step], recipe: Recipe, store: str, run_name: str, before: dict[str, Planned] | None = None
) -> dict[str, Planned]:
    """Every step's merged, validated config and output URI, in order; a ConfigError names the
    first wrong one. Inputs from upstream outputs are not checked for existence (not made yet).
    `before`: the steps planned earlier in the run (their outputs can be inputs; their names are taken)."""
    planned: dict[str, Planned] = dict(before or {})
    for step in steps:
        if step.name in planned:
            raise ValueError(f"pipeline step {step.name!r} twice")
        if step.stage not in STAGES:
            raise ValueError(f"pipeline step {step.name!r}: unknown stage {step.stage!r}")
        _refuse_owned(step)
        inputs = {k: _uri(v, planned) for k, v in step.inputs.items()}
        pending = {k for k, v in step.inputs.items() if isinstance(v, Output)}
        config_file = recipe.file(step.role)
        cfg = build_config(step.stage, config_file, {**step.overrides, **inputs}, pending=pending)
        digest = identity_hash(step.stage, cfg, inputs)
        planned[step.name] = Planned(
            step, config_file, cfg, inputs, digest, stage_dir(store, run_name, step.stage, digest)
        )
    return {name: p for name, p in planned.items() if name not in (before or {})}


def _refuse_owned(step: Step) -> None:
    """A setting the flow makes for a stage, given in its parameters too, would be silently replaced:
    where the stage writes (its folder in the store, its checkpoints, resuming) and the inputs the flow
    feeds it (an upstream stage's model)."""
    kind = STAGES[step.stage]
    owned = {kind.output_field: "where it commits: <store>/<run_name>/<stage>-<identity>/model"}
    if kind.resumable:
        checkpoints = "its checkpoints, beside its model, resumed on a retry"
        owned |= dict.fromkeys(("ckpt_path", "load_checkpoint"), checkpoints)
    for key, value in step.inputs.items():
        owned[key] = f"the {value.step!r} stage's output" if isinstance(value, Output) else f"{value}"
    for key in sorted(owned.keys() & step.overrides.keys()):
        raise ConfigError(
            f"{step.name}: {key}={step.overrides[key]!r} is set by the flow ({owned[key]}); drop it from the "
            f"stage's parameters (a recipe file may name it for the CLI; the flow replaces it there)"
        )


def flow_sets(step: str, given: dict[str, Any], **values: Any) -> dict[str, Any]:
    """A stage's parameters with the settings the flow makes for it (`values`); one the user gave too is
    refused (ConfigError), not silently replaced, unless it is the same."""
    for key in sorted(values.keys() & given.keys()):
        if given[key] != values[key]:
            raise ConfigError(
                f"{step}: {key}={given[key]!r} is set by the flow ({key}={values[key]!r}); drop it from the "
                f"stage's parameters"
            )
    return {**given, **values}


def _uri(value: str | Output, planned: dict[str, Planned]) -> str:
    if not isinstance(value, Output):
        return value
    if value.step not in planned:
        raise ValueError(f"input from step {value.step!r}, which is not an earlier step")
    uri = planned[value.step].model_uri
    return storage.file_in(uri, value.file) if value.file else uri


def configs_markdown(flow: str, run_name: str, recipe: Recipe, planned: dict[str, Planned]) -> str:
    where = f"recipe `{recipe.name}` ({recipe.folder})" if recipe.name else "no recipe (schema defaults)"
    parts = [
        f"# {flow} · {run_name}: merged stage configs",
        "",
        f"From {where}, then this run's parameters, then upstream outputs; each stage commits to its `model_uri`.",
        "",
    ]
    for name, p in planned.items():
        body = yaml.safe_dump(config_summary(p.cfg), sort_keys=True, default_flow_style=False)
        parts += [
            f"## {name} (`{p.step.stage}`)",
            "",
            f"model_uri: `{p.model_uri}`",
            "",
            "```yaml",
            body.rstrip(),
            "```",
            "",
        ]
    return "\n".join(parts)


async def publish_configs(flow: str, run_name: str, recipe: Recipe, planned: dict[str, Planned]) -> None:
    await acreate_markdown_artifact(
        key=artifact_key(run_name, "configs"),
        markdown=configs_markdown(flow, run_name, recipe, planned),
        description=f"{flow}: every stage's merged config",
    )


async def run(
    planned: dict[str, Planned],
    runner: Callable[[Planned, str, Cluster], Awaitable[StageResult]],
    store: str,
    run_name: str,
    cluster: Cluster,
) -> AsyncIterator[tuple[str, StageResult]]:
    """Run the planned steps in order with `runner` (tasks.stage.stage_runner), yielding each
    (name, result) as it commits."""
    for name, p in planned.items():
        result = await runner(p, run_name, cluster)
        if result.model_uri != p.model_uri:  # the plan and the run disagree on the identity: a bug, not input
            raise RuntimeError(f"step {name}: committed {result.model_uri}, planned {p.model_uri}")
        yield name, result
