"""Run one command as a Ray job: submit, stream its log into a logger, wait, stop on cancel."""
from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from ray.job_submission import JobStatus, JobSubmissionClient

from alignment.events import PREFIX as EVENT_PREFIX

# Environment passed to jobs explicitly. Only non-secret settings: credentials reach a job
# through the cluster's own environment, so they never land in Ray's job metadata.
PASSED_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
              "TRANSFORMERS_OFFLINE", "WANDB_MODE", "DS_ACCELERATOR", "ALIGNFLOW_CACHE", "ALIGNFLOW_STORE_RETRIES",
              "OMP_NUM_THREADS", "ALIGNFLOW_FAIL_AT_STEP")  # the last: failure injection (docs/resume.md)


def job_python() -> str:
    """Interpreter of the stage jobs: ALIGNFLOW_JOB_PYTHON, else this one (the embedded cluster shares our venv)."""
    return os.environ.get("ALIGNFLOW_JOB_PYTHON", sys.executable)


def job_env() -> dict[str, str]:
    """Environment of a stage job: PASSED_ENV and the names listed in ALIGNFLOW_JOB_ENV (comma-separated,
    e.g. set per deployment through `job_variables: {env: ...}`), as they are in this process."""
    extra = [n.strip() for n in os.environ.get("ALIGNFLOW_JOB_ENV", "").split(",") if n.strip()]
    env = {k: os.environ[k] for k in (*PASSED_ENV, *extra) if k in os.environ}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("PYTHONSAFEPATH", "1")     # `python -m` must not import a checkout that happens to be the job's cwd
    env.setdefault("RAY_COLOR_PREFIX", "0")   # rank lines come as "(RayTrainWorker pid=..) ...", no colour codes
    return env


def runtime_env(env: dict[str, str]) -> dict:
    """The job's runtime_env: its environment and the project's code. `alignment` travels as a
    py_module (Ray zips it once per content hash and caches it on every node), ahead of any
    installed copy on the job's and the ranks' sys.path, so a node needs only the Python
    environment (requirements), not a checkout at the same path."""
    import alignment
    return {"env_vars": env, "py_modules": [str(Path(alignment.__file__).parent)],
            "excludes": ["__pycache__", "*.pyc"]}


_PROGRESS = re.compile(r"\|\s*\d+/\d+ \[")  # tqdm: "| 972/1200 [01:57<00:30, ..."


class StageJobFailed(RuntimeError):
    """The stage's Ray job ended in FAILED or STOPPED; the message carries its last error lines."""


class StageInputRefused(RuntimeError):
    """The stage's CLI refused its input (exit status 2: bad data, flag or path, one `error:` line).
    Not a StageJobFailed: running the same job again would fail the same way, so it is not retried."""


# Ray's job message for a failed entrypoint: "Job entrypoint command failed with exit code 2, ..."
_EXIT_CODE = re.compile(r"failed with exit code (\d+)")


@dataclass
class JobOutcome:
    submission_id: str
    status: str
    log_tail: list[str]


def _error_lines(log_text: str, n: int = 12) -> list[str]:
    lines = [ln for ln in log_text.splitlines()
             if ln.strip() and not re.match(r"^\S+:\s+\d+%\|", ln) and EVENT_PREFIX not in ln]
    flagged = [ln for ln in lines if re.search(r"error|Error|Traceback|Exception|failure", ln)]
    return (flagged or lines)[-n:]


async def run_job(address: str, submission_id: str, entrypoint: str, env: dict[str, str], metadata: dict[str, str],
                  logger: logging.Logger | logging.LoggerAdapter,
                  on_line: Callable[[str], Awaitable[bool]] | None = None) -> JobOutcome:
    """Submit and follow one job. Raises StageJobFailed when it fails; stops it if we're cancelled.
    `on_line` sees every log line first; the lines it consumes (progress events) are not logged."""
    client = JobSubmissionClient(address)
    for attempt in range(60):
        try:
            client.submit_job(entrypoint=entrypoint, submission_id=submission_id, metadata=metadata,
                              runtime_env=runtime_env(env))
            break
        except RuntimeError as e:
            # a head that has just started answers before its job agent is up
            if "No available agent" not in str(e) or attempt == 59:
                raise
            await asyncio.sleep(1.0)
    logger.info("submitted Ray job %s: %s", submission_id, entrypoint)
    try:
        async for chunk in client.tail_job_logs(submission_id):
            for line in chunk.splitlines():
                if not line.strip() or _PROGRESS.search(line):  # progress-bar redraws stay out of the log
                    continue
                if on_line is None or not await on_line(line):
                    logger.info("%s", line)
    except BaseException:
        # Cancelled (CancelledError), terminated by a worker (Prefect turns SIGTERM into an
        # exception) or interrupted: the job must not outlive its task.
        client.stop_job(submission_id)
        logger.warning("task interrupted: stopped Ray job %s", submission_id)
        raise
    status = client.get_job_status(submission_id)
    while not status.is_terminal():
        await asyncio.sleep(0.5)
        status = client.get_job_status(submission_id)
    tail = _error_lines(client.get_job_logs(submission_id))
    if status != JobStatus.SUCCEEDED:
        info = client.get_job_info(submission_id)
        code = _EXIT_CODE.search(info.message or "")
        if status == JobStatus.FAILED and code and code.group(1) == "2":
            refused = [ln for ln in tail if "error: " in ln] or tail
            raise StageInputRefused(f"Ray job {submission_id}: the stage refused its input: {refused[-1].strip()}")
        raise StageJobFailed(f"Ray job {submission_id} {status.value}: {info.message or ''}\n" + "\n".join(tail))
    return JobOutcome(submission_id, status.value, tail)
