"""Run one command as a Ray job: submit, stream its log into a logger, wait, stop on cancel."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from ray.job_submission import JobStatus, JobSubmissionClient

import alignment
from alignment.errors import EXIT_INPUT, EXIT_TRANSIENT
from alignment.events import PREFIX as EVENT_PREFIX
from alignment.models.card import CODE_VERSION_ENV, code_version

# Environment passed to jobs explicitly. Only non-secret settings: credentials reach a job
# through the cluster's own environment, so they never land in Ray's job metadata.
PASSED_ENV = (
    "AWS_ENDPOINT_URL_S3",
    "AWS_DEFAULT_REGION",
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "WANDB_MODE",
    "DS_ACCELERATOR",
    "ALIGNFLOW_CACHE",
    "ALIGNFLOW_STORE_RETRIES",
    "ALIGNFLOW_STORE_THREADS",
    "ALIGNFLOW_STORE_READ_TIMEOUT",
    "OMP_NUM_THREADS",
    "ALIGNFLOW_FAIL_AT_STEP",
    "ALIGNFLOW_HANG_AT_STEP",
)  # failure injection (docs/resume.md, reliability.md)


def job_python() -> str:
    """Interpreter of the stage jobs: ALIGNFLOW_JOB_PYTHON, else this one (the embedded cluster shares our venv)."""
    return os.environ.get("ALIGNFLOW_JOB_PYTHON", sys.executable)


def job_env() -> dict[str, str]:
    """Environment of a stage job: PASSED_ENV and the names listed in ALIGNFLOW_JOB_ENV (comma-separated,
    e.g. set per deployment through `job_variables: {env: ...}`), as they are in this process."""
    extra = [n.strip() for n in os.environ.get("ALIGNFLOW_JOB_ENV", "").split(",") if n.strip()]
    env = {k: os.environ[k] for k in (*PASSED_ENV, *extra) if k in os.environ}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("PYTHONSAFEPATH", "1")  # `python -m` must not import a checkout that happens to be the job's cwd
    env.setdefault("RAY_COLOR_PREFIX", "0")  # rank lines come as "(StageRank pid=..) ...", no colour codes
    # The job log is the record of every rank. Ray's default dedup drops a line from another process
    # that differs only in words holding digits ("rank 1 of 2 on Ray node 3f9c..." after rank 0's).
    env.setdefault("RAY_DEDUP_LOGS", "0")
    env.setdefault(CODE_VERSION_ENV, code_version())  # for the model cards: the shipped code has no .git
    return env


def runtime_env(env: dict[str, str]) -> dict:
    """The job's runtime_env: its environment and the project's code. `alignment` travels as a
    py_module (Ray zips it once per content hash and caches it on every node), ahead of any
    installed copy on the job's and the ranks' sys.path, so a node needs only the Python
    environment (requirements), not a checkout at the same path."""

    return {"env_vars": env, "py_modules": [str(Path(alignment.__file__).parent)], "excludes": ["__pycache__", "*.pyc"]}


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
    lines = [
        ln
        for ln in log_text.splitlines()
        if ln.strip() and not re.match(r"^\S+:\s+\d+%\|", ln) and EVENT_PREFIX not in ln
    ]
    flagged = [ln for ln in lines if re.search(r"error|Error|Traceback|Exception|failure", ln)]
    return (flagged or lines)[-n:]


@dataclass(frozen=True)
class Watch:
    """When a running stage job counts as hung: no log line for `heartbeat_s` (rank 0 logs a progress
    event at every optimizer step; Ray's daemons' lines do not count, see is_heartbeat), or still
    running after `timeout_s`. A hung job is stopped and the stage retried (it resumes from its last
    checkpoint). Per deployment through the worker's environment
    (`job_variables: {env: {ALIGNFLOW_STAGE_HEARTBEAT_S: ...}}`)."""

    heartbeat_s: float = 1800.0
    timeout_s: float | None = None
    reconnect_s: float = 300.0  # how long the Ray head may stay unreachable before the task gives up

    @classmethod
    def from_env(cls) -> "Watch":
        timeout = float(os.environ.get("ALIGNFLOW_STAGE_TIMEOUT_S", "0"))
        return cls(float(os.environ.get("ALIGNFLOW_STAGE_HEARTBEAT_S", cls.heartbeat_s)), timeout or None)


class StageJobHung(StageJobFailed):
    """The job went silent past the heartbeat or ran past its timeout; it was stopped."""


async def _status(client: JobSubmissionClient, submission_id: str, watch: Watch, logger) -> JobStatus:
    """The job's status, asked again through a network blip (up to `watch.reconnect_s`)."""
    deadline = time.monotonic() + watch.reconnect_s
    while True:
        try:
            return client.get_job_status(submission_id)
        except (OSError, RuntimeError) as e:  # requests' errors are OSErrors; HTTP errors RuntimeErrors
            if time.monotonic() > deadline:
                raise StageJobFailed(f"lost the Ray head while following job {submission_id}: {e}") from e
            logger.warning("Ray head not answering about job %s (%s); asking again", submission_id, e)
            await asyncio.sleep(2.0)


# Ray's own daemons print into a job's log too ("(raylet) ... is over 95% full" every 10 s while a
# disk is nearly full): such a line says nothing of the stage's progress and is no heartbeat.
_RAY_DAEMON_LINE = re.compile(r"\((raylet|gcs_server|autoscaler|monitor|dashboard|log_monitor)[\s,)]")


def is_heartbeat(line: str) -> bool:
    """Whether a job log line shows the stage alive: any line but one of Ray's own daemons'."""
    return not _RAY_DAEMON_LINE.match(line)


# A finished job's log stream ends only ~3 s after the job (Ray's log tail sleeps 1 s at each EOF
# and reads two EOFs past the end), which every stage would pay: while no line arrives the task asks
# for the job's status at this interval and, once it has ended, reads the rest of its log at once.
STATUS_POLL_S = 1.0


async def _follow(
    client: JobSubmissionClient, submission_id: str, emit: Callable[[str], Awaitable[None]], watch: Watch, logger
) -> str:
    """Stream the job's log into `emit` until the job ends; return its whole log. A dropped stream (a
    network blip between this worker and the head) is reopened and the lines already seen are skipped:
    the job keeps running."""
    started = last_line = time.monotonic()
    seen = 0

    async def emit_new(lines: list[str], count: int) -> int:
        nonlocal seen, last_line
        for line in lines:
            count += 1
            if count > seen:  # a reopened stream starts from the first line again
                seen = count
                if is_heartbeat(line):
                    last_line = time.monotonic()
                await emit(line)
        return count

    while True:
        count, ended = 0, False
        stream = client.tail_job_logs(submission_id)
        pending: asyncio.Future | None = None
        try:
            while not ended:
                if pending is None:
                    pending = asyncio.ensure_future(stream.__anext__())
                now = time.monotonic()
                quiet_left = watch.heartbeat_s - (now - last_line)
                run_left = watch.timeout_s - (now - started) if watch.timeout_s else float("inf")
                if min(quiet_left, run_left) <= 0:
                    what = (
                        f"ran past its timeout of {watch.timeout_s:.0f}s"
                        if run_left <= quiet_left
                        else f"logged nothing for {watch.heartbeat_s:.0f}s (ALIGNFLOW_STAGE_HEARTBEAT_S)"
                    )
                    raise StageJobHung(f"Ray job {submission_id} {what}: stopped as hung")
                done, _ = await asyncio.wait({pending}, timeout=min(quiet_left, run_left, STATUS_POLL_S))
                if done:
                    chunk, pending = pending.result(), None
                    count = await emit_new(chunk.splitlines(), count)
                else:
                    ended = (await _status(client, submission_id, watch, logger)).is_terminal()
        except StopAsyncIteration:
            pending = None
        except (OSError, RuntimeError, asyncio.IncompleteReadError) as e:  # aiohttp's errors are OSErrors
            if isinstance(e, StageJobFailed):
                raise
            pending = None
            logger.warning("log stream of Ray job %s broke (%s: %s)", submission_id, type(e).__name__, e)
        finally:
            await _close(stream, pending)
        if ended or (await _status(client, submission_id, watch, logger)).is_terminal():
            text = client.get_job_logs(submission_id)
            await emit_new(text.splitlines(), 0)  # what the stream had not delivered yet
            return text
        logger.warning("Ray job %s is still running: reconnecting to its log (%d lines seen)", submission_id, seen)
        await asyncio.sleep(1.0)


async def _close(stream, pending: asyncio.Future | None) -> None:
    """Close the log stream, first cancelling a read still in flight (an async generator that is
    running can't be closed). Such a read is left over when the job ended, was found hung or the task
    was cancelled: what it would have returned is read from the whole log or not needed."""
    if pending is not None:
        pending.cancel()
        await asyncio.wait({pending})
        if not pending.cancelled():
            pending.exception()  # retrieved, so asyncio does not report it as never retrieved
    await stream.aclose()


def _stop(client: JobSubmissionClient, submission_id: str, logger) -> None:
    """Stop the job; a head that is already gone (the flow is being torn down) is only a warning."""
    try:
        client.stop_job(submission_id)
        logger.warning("task interrupted: stopped Ray job %s", submission_id)
    except Exception as e:  # noqa: BLE001 - reported; the interruption itself is re-raised by the caller
        logger.warning(
            "task interrupted: could not stop Ray job %s (%s: %s); the head may be gone already",
            submission_id,
            type(e).__name__,
            str(e).splitlines()[0] if str(e) else "",
        )


async def run_job(
    address: str,
    submission_id: str,
    entrypoint: str,
    env: dict[str, str],
    metadata: dict[str, str],
    logger: logging.Logger | logging.LoggerAdapter,
    on_line: Callable[[str], Awaitable[bool]] | None = None,
    watch: Watch | None = None,
) -> JobOutcome:
    """Submit and follow one job. Raises StageJobFailed when it fails or hangs (StageInputRefused when
    it refused its input); stops it if we're cancelled.
    `on_line` sees every log line first; the lines it consumes (progress events) are not logged."""
    watch = watch or Watch.from_env()
    client = JobSubmissionClient(address)
    for attempt in range(60):
        try:
            client.submit_job(
                entrypoint=entrypoint, submission_id=submission_id, metadata=metadata, runtime_env=runtime_env(env)
            )
            break
        except RuntimeError as e:
            # a head that has just started answers before its job agent is up
            if "No available agent" not in str(e) or attempt == 59:
                raise
            await asyncio.sleep(1.0)
    logger.info("submitted Ray job %s: %s", submission_id, entrypoint)

    async def emit(line: str) -> None:
        if not line.strip() or _PROGRESS.search(line):  # progress-bar redraws stay out of the log
            return
        if on_line is None or not await on_line(line):
            logger.info("%s", line)

    try:
        log_text = await _follow(client, submission_id, emit, watch, logger)
        status = await _status(client, submission_id, watch, logger)
        while not status.is_terminal():
            await asyncio.sleep(0.5)
            status = await _status(client, submission_id, watch, logger)
    except BaseException:
        # Hung, cancelled (CancelledError), terminated by a worker (Prefect turns SIGTERM into an
        # exception) or interrupted: the job must not outlive its task.
        _stop(client, submission_id, logger)
        raise
    tail = _error_lines(log_text)
    if status != JobStatus.SUCCEEDED:
        info = client.get_job_info(submission_id)
        code = _EXIT_CODE.search(info.message or "")
        if status == JobStatus.FAILED and code and code.group(1) == str(EXIT_INPUT):
            refused = [ln for ln in tail if "error: " in ln] or tail
            raise StageInputRefused(f"Ray job {submission_id}: the stage refused its input: {refused[-1].strip()}")
        kind = " (a transient fault: retried)" if code and code.group(1) == str(EXIT_TRANSIENT) else ""
        raise StageJobFailed(f"Ray job {submission_id} {status.value}{kind}: {info.message or ''}\n" + "\n".join(tail))
    return JobOutcome(submission_id, status.value, tail)
