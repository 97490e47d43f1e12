"""The stage task: skip a finished stage, or run it as a Ray job that resumes from its last checkpoint."""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Awaitable, Callable

from prefect import get_run_logger, task
from prefect.runtime import flow_run, task_run
from prefect.tasks import exponential_backoff

from alignflow.tasks.cluster.ray_cluster import Cluster
from alignflow.tasks.cluster.ray_job import StageJobFailed, job_env, job_python, run_job
from alignflow.tasks.orchestration.output_slot import output_slot
from alignflow.tasks.orchestration.pipeline import Planned
from alignflow.tasks.orchestration.stage_spec import STAGES, job_config
from alignflow.tasks.presentation.artifacts import publish_stage, read_metrics
from alignflow.tasks.presentation.progress import StageProgress
from alignflow.tasks.presentation.results import StageResult, dir_of_model
from alignment import events, storage
from alignment.config.cli import config_to_yaml
from alignment.config.stages import StageConfig
from alignment.config.tracking import TRACKING_ENV
from alignment.errors import TransientError

if TYPE_CHECKING:
    import logging


def submission_id(run_name: str, stage: str, digest: str) -> str:
    """Deterministic per attempt: the flow run and its run count (`prefect flow-run retry` runs the
    same flow run again), the stage identity and the task's try number. Ray refuses a reused id."""
    # the id's random tail: Prefect's flow-run ids are UUIDv7, whose head is a timestamp shared by runs
    # created within a minute (two scheduled runs of one round collided on it)
    run = str(flow_run.id or "local")[-8:]
    return f"alignflow-{run_name}-{stage}-{digest[:8]}-{run}-f{flow_run.run_count or 1}-try{task_run.run_count or 1}"


def committed(stage: str, model_uri: str) -> StageResult | None:
    """The stage's result when its output is already committed (same config and inputs: same folder)."""
    manifest = storage.read_manifest(model_uri)
    if manifest is None:
        return None
    get_run_logger().info("stage %s already committed at %s: skipping it (same config and inputs)", stage, model_uri)
    return StageResult(stage, model_uri, True, manifest.get("metadata", {}).get("final_metrics", {}))


def stage_runner(retries: int) -> Callable[[Planned, str, Cluster], Awaitable[StageResult]]:
    """How a flow runs a planned stage on its cluster: a committed stage is skipped before anything else, so
    a flow whose stages are all committed never starts a Ray head; the others run as `run_stage` tasks with
    the config and identity the plan made (alignflow/tasks/orchestration/pipeline.py)."""
    task_with_retries = run_stage.with_options(retries=retries)

    async def run(p: Planned, run_name: str, cluster: Cluster) -> StageResult:
        done = committed(p.step.stage, p.model_uri)
        if done is not None:
            return done
        return await task_with_retries(p.step.stage, run_name, cluster.address, p.cfg, p.digest, p.out)

    return run


def retry_only_job_failures(task, task_run, state) -> bool:
    """Retry a failed, killed or hung job, or one that met a transient fault (exit 75: the store or a
    reward server down); it resumes from its checkpoint. Never a refused input (exit 2: it would
    fail the same way). Also a transient fault of the task's own store calls (the store still down
    when the retried task reads it). Prefect hands the exception over as the failed state's data."""
    return isinstance(state.data, (StageJobFailed, TransientError))


# Beside the stage's model (not in it: the committed model is never touched again), what making it took, so
# that a later run that skips the stage can still say so (the learning benchmark's wall times)
WALL_FILE = "wall.json"


# Each try's wall time so far, by task run. Prefect runs a task's retries in this process by calling
# the task function again, so a try cannot carry what the earlier ones took; kept here, dropped when
# a try succeeds (a task that fails for good leaves a few floats until the flow process exits).
_TRY_WALL_S: dict[str, list[float]] = {}


# 2 s, 4 s, 8 s, ... between tries (Prefect's exponential backoff, ±20 % jitter): a store or reward
# server that is restarting gets time to come back
@task(
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=2),
    retry_jitter_factor=0.2,
    task_run_name="{stage}",
    retry_condition_fn=retry_only_job_failures,
)
async def run_stage(
    stage: str, run_name: str, ray_address: str, cfg: StageConfig, digest: str, out: str
) -> StageResult:
    """Run `stage` with its planned config `cfg` (identity `digest`, folder `out`) unless its output is
    already committed in the store.

    The result's wall time is the sum of every try's (the waits between tries aside), with their number.
    """
    tries = _TRY_WALL_S.setdefault(str(task_run.id), []) if task_run.id else []
    started = time.monotonic()
    try:
        result = await _run_try(stage, run_name, ray_address, cfg, digest, out)
    finally:
        tries.append(time.monotonic() - started)
    _TRY_WALL_S.pop(str(task_run.id), None)
    if result.skipped and len(tries) == 1:  # committed before this flow run: nothing ran
        return result
    # a try may have committed the output and failed after (e.g. publishing): the next finds it
    # committed, but this flow run did make it
    storage.write_text_atomic(f"{out}/{WALL_FILE}", json.dumps({"wall_s": sum(tries), "tries": len(tries)}))
    return replace(result, skipped=False, wall_s=sum(tries), tries=len(tries))


def recorded_wall_s(model_uri: str) -> float | None:
    """The wall time, every try's summed, of the flow run that made this stage's model; None if unknown."""
    text = storage.read_text(f"{dir_of_model(model_uri)}/{WALL_FILE}")
    return json.loads(text)["wall_s"] if text else None


async def _run_try(stage: str, run_name: str, ray_address: str, cfg: StageConfig, digest: str, out: str) -> StageResult:
    """One try of run_stage."""
    logger = get_run_logger()
    started = time.monotonic()
    if (done := committed(stage, f"{out}/model")) is not None:
        return done
    async with output_slot(out) as limit:  # two flow runs on one output queue here
        if (done := committed(stage, f"{out}/model")) is not None:
            return done  # the run we queued behind committed it
        logger.info("stage %s holds the concurrency limit %s (its output %s)", stage, limit, out)
        return await _run_job_try(stage, cfg, digest, out, run_name, ray_address, logger, started)


async def _run_job_try(
    stage: str,
    cfg: StageConfig,
    digest: str,
    out: str,
    run_name: str,
    ray_address: str,
    logger: logging.Logger | logging.LoggerAdapter,
    started: float,
) -> StageResult:
    """The Ray job of one try, its output's slot held."""
    model_uri = f"{out}/model"
    # the job reads its resolved config from the stage directory, so every output in the store
    # sits beside the config that made it (no secret: build_config refuses keys in flow configs)
    config_uri = f"{out}/config.yaml"
    storage.write_text_atomic(config_uri, config_to_yaml(job_config(stage, cfg, out, run_name)))
    entrypoint = shlex.join([job_python(), "-m", STAGES[stage].module, "--config", config_uri])
    env = job_env()
    env[events.ENV_SWITCH] = "1"  # rank 0 reports progress as events in its log (alignment.events)
    env[TRACKING_ENV] = out  # an offline wandb run is kept beside the model, not in the job's temp dir
    latest = storage.get_latest(f"{out}/checkpoints", "global_step") if STAGES[stage].resumable else None
    if latest:
        logger.info("resuming stage %s from committed checkpoint %s", stage, latest)
    progress = StageProgress(run_name, stage, logger)
    await progress.start()
    await run_job(
        ray_address,
        submission_id(run_name, stage, digest),
        entrypoint,
        env,
        {"alignflow_run": run_name, "alignflow_stage": stage, "alignflow_output": out},
        logger,
        progress.on_line,
    )
    manifest = storage.read_manifest(model_uri)
    if manifest is None:
        raise RuntimeError(f"stage {stage}: the Ray job succeeded but {model_uri} has no MANIFEST.json")
    await progress.finish()
    await publish_stage(run_name, stage, model_uri, read_metrics(model_uri), out, manifest)
    final = manifest.get("metadata", {}).get("final_metrics", {})
    logger.info("stage %s committed %s in %.1fs", stage, model_uri, time.monotonic() - started)
    return StageResult(stage, model_uri, False, final)  # wall time and tries: run_stage's
