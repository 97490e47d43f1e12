"""Running a flow from a test and reading what it did: its result and Prefect logs, its Ray jobs, their ranks; and
stopping its PPO job mid-stage."""

from __future__ import annotations

import asyncio
import re
import time

from alignflow.flows.sft import sft_flow

# A few steps of the tiny-world SFT (the deployment's config file provides the rest).
QUICK = {"max_steps": 6, "save_steps": 3, "eval_dataset": None, "logging_steps": 1}


def run_flow(**params):
    """Run the flow; return (result, flow_run_id)."""
    state = asyncio.run(sft_flow(return_state=True, **{"recipe": "tiny", **params}))
    return state.result(), state.state_details.flow_run_id


async def _flow_logs(flow_run_id) -> str:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    async with get_client() as client:
        logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    return "\n".join(log.message for log in logs)


def flow_logs(flow_run_id) -> str:
    time.sleep(1.0)  # logs reach the API in batches
    return asyncio.run(_flow_logs(flow_run_id))


def ray_jobs(address: str, run_name: str) -> list:
    from ray.job_submission import JobSubmissionClient

    jobs = JobSubmissionClient(address).list_jobs()
    return sorted(
        (j for j in jobs if (j.metadata or {}).get("alignflow_run") == run_name),
        key=lambda j: (j.start_time or 0, j.submission_id),
    )  # oldest first, across flow runs


def stop_ppo_after_a_checkpoint(address: str, run_name: str, store: str, timeout_s: float = 600) -> str | None:
    """Stop (`ray job stop`: SIGTERM to the driver) the run's running PPO job whose output is under `store` once it
    has committed a checkpoint: that checkpoint, the newest then; None when none was caught within `timeout_s`."""
    from ray.job_submission import JobSubmissionClient

    from alignment import storage

    client, killed_at = JobSubmissionClient(address), None
    deadline = time.monotonic() + timeout_s
    while killed_at is None and time.monotonic() < deadline:
        for job in ray_jobs(address, run_name):
            out = job.metadata.get("alignflow_output", "")
            if (
                job.metadata.get("alignflow_stage") == "ppo"
                and job.status.value == "RUNNING"
                and out.startswith(store)
                and storage.list_committed(f"{out}/checkpoints")
            ):
                client.stop_job(job.submission_id)
                killed_at = storage.get_latest(f"{out}/checkpoints")
                break
        time.sleep(0.05)
    return killed_at


def rank_pids(client, submission_id: str) -> list[int]:
    """The PIDs of a job's rank actors, from the job's own log (Ray prefixes an actor's lines with
    `(StageRank pid=N, ...)`): this job's ranks only, not those of a test running beside it."""
    log = client.get_job_logs(submission_id)
    return sorted({int(pid) for pid in re.findall(r"pid=(\d+)[^)]*\) rank \d+ of \d+ on Ray node", log)})
