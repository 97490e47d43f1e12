"""Before/after evaluation for recipes that have one: the tiny world's held-out arithmetic
questions, answered greedily by a committed model, as a Ray job (the Prefect process loads no
model). The result is written next to the model in the store, so a rerun reads it back — before
it asks for the cluster, so a rerun whose stages and evaluations are all saved starts no Ray head."""
from __future__ import annotations

import hashlib
import json
import shlex

from prefect import get_run_logger, task
from prefect.artifacts import acreate_table_artifact

from alignment import storage
from alignflow.tasks.artifacts import artifact_key
from alignflow.tasks.ray_cluster import Cluster
from alignflow.tasks.ray_job import job_env, job_python, run_job
from alignflow.tasks.stage import retry_only_job_failures, submission_id


def result_uri(model_uri: str) -> str:
    """`heldout_arithmetic.json` in the stage directory, beside the model it measured."""
    return f"{model_uri.rstrip('/').rsplit('/', 1)[0]}/heldout_arithmetic.json"


def saved_result(result_at: str) -> dict | None:
    """{"accuracy", "n", "examples"} saved at `result_at` by an earlier evaluation, or None."""
    text = storage.read_text(result_at)
    return json.loads(text) if text is not None else None


@task(retries=2, retry_delay_seconds=1, task_run_name="heldout-eval-{label}", retry_condition_fn=retry_only_job_failures)
async def heldout_accuracy(label: str, model_uri: str, run_name: str, ray_address: str, out: str) -> dict:
    """Evaluate the committed model at `model_uri` as a Ray job that saves its result at `out` (a retry
    first reads what an earlier try saved)."""
    saved = saved_result(out)
    if saved is not None:
        return saved
    entrypoint = shlex.join([job_python(), "-m", "alignment.cli.eval_tiny", "--pretrain", model_uri, "--save_json", out])
    digest = hashlib.sha256(model_uri.encode()).hexdigest()[:8]
    await run_job(ray_address, submission_id(run_name, f"eval-{label}", digest), entrypoint, job_env(),
                  {"alignflow_run": run_name, "alignflow_stage": f"eval-{label}"}, get_run_logger())
    result = saved_result(out)
    if result is None:
        raise RuntimeError(f"held-out evaluation of {model_uri} succeeded but wrote no {out}")
    return result


async def evaluate_heldout(label: str, model_uri: str, run_name: str, cluster: Cluster,
                           result_at: str | None = None) -> dict:
    """The model's held-out accuracy: the saved result, or a new evaluation on the cluster (only then
    is `cluster.address` read, which starts an embedded head). The result is saved beside the model
    (result_uri) or, for a model the run did not make, at `result_at`. Logs one line and publishes the
    questions as a table artifact `<run>-heldout-<label>`, rather than the result's JSON in the log."""
    out = result_at or result_uri(model_uri)
    result = saved_result(out)
    if result is None:
        result = await heldout_accuracy(label, model_uri, run_name, cluster.address, out)
    summary = f"held-out greedy accuracy after {label}: {result['accuracy']:.1%} of {result['n']} questions"
    rows = [{"question": q, "response": r, "answer": a, "right": r.split("=")[-1].strip() == a}
            for q, r, a in result.get("examples", [])]
    key = artifact_key(run_name, "heldout", label)
    await acreate_table_artifact(key=key, table=rows, description=f"{summary} (first {len(rows)} shown)")
    get_run_logger().info("%s (examples: artifact %s)", summary, key)
    return result
