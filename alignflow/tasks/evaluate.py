"""Before/after evaluation for recipes that have one: the tiny world's held-out arithmetic
questions, answered greedily by a committed model, as a Ray job (the Prefect process loads no
model). The result is written next to the model in the store, so a rerun reads it back."""
from __future__ import annotations

import hashlib
import json
import shlex

from prefect import get_run_logger, task

from alignment import storage
from alignflow.tasks.ray_job import job_env, job_python, run_job
from alignflow.tasks.stage import retry_only_job_failures, submission_id


@task(retries=2, retry_delay_seconds=1, task_run_name="heldout-eval-{label}", retry_condition_fn=retry_only_job_failures)
async def heldout_accuracy(label: str, model_uri: str, run_name: str, ray_address: str) -> dict:
    """{"accuracy", "n", "examples"} of the committed model at `model_uri`."""
    logger = get_run_logger()
    result_uri = f"{model_uri.rstrip('/').rsplit('/', 1)[0]}/heldout_arithmetic.json"
    text = storage.read_text(result_uri)
    if text is None:
        entrypoint = shlex.join([job_python(), "-m", "alignment.cli.eval_tiny", "--pretrain", model_uri,
                                 "--save_json", result_uri])
        env = job_env()
        digest = hashlib.sha256(model_uri.encode()).hexdigest()[:8]
        await run_job(ray_address, submission_id(run_name, f"eval-{label}", digest), entrypoint, env,
                      {"alignflow_run": run_name, "alignflow_stage": f"eval-{label}"}, logger)
        text = storage.read_text(result_uri)
        if text is None:
            raise RuntimeError(f"held-out evaluation of {model_uri} succeeded but wrote no {result_uri}")
    result = json.loads(text)
    logger.info("held-out greedy accuracy after %s: %.1f%% of %d questions", label, 100 * result["accuracy"], result["n"])
    return result
