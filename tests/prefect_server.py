"""A real Prefect server for the deployment tests (tests/test_deployment.py): started on loopback with the
shipped deployments registered by scripts/deploy.sh and a process worker (scripts/worker.sh) polling its pool,
and the Prefect CLI and API as a user's shell would reach them; a worker started as some supervisors start it, and
the script that serves iterative-dpo on a short schedule."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

from tests.conftest import REPO
from tests.fixtures_s3 import free_port, stop_process

PREFECT = str(Path(sys.executable).parent / "prefect")

# `python -c SERVE_NIGHTLY store ray_address policy`: iterative-dpo served (`flow.serve`) on a 20 s interval instead
# of the nightly deployment's cron
SERVE_NIGHTLY = """
import sys
from alignflow.flows.iterative_dpo import iterative_dpo_flow
store, ray_address, policy = sys.argv[1:4]
# its own deployment name: the shipped iterative-dpo/nightly (registered by the fixture) has a
# concurrency limit the served runner would have to honour; this test is about the schedule
# 128 prompts and 2 DPO steps of 2 pairs a round (the shipped round is 2,048 prompts, 2 epochs): a few pairs
# to train on, and the schedule is what this test is about
iterative_dpo_flow.serve(name="nightly-served", interval=20, limit=1, parameters={
    "run_name": "served", "store": store, "ray_address": ray_address, "initial_policy": policy, "recipe": "tiny-idpo",
    "generate": {"rollout_batch_size": 128},
    "dpo": {"max_epochs": 1, "max_steps": 2, "train_batch_size": 2, "micro_train_batch_size": 1}})
"""


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"prefect server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2).read()
            return
        except OSError:
            time.sleep(0.5)
    raise AssertionError("prefect server did not become healthy")


class Prefect:
    """The CLI against the module's server, as a user's shell would run it."""

    def __init__(self, env: dict[str, str], logs: Path):
        self.env, self.logs = env, logs
        self.api = env["PREFECT_API_URL"]
        self.ui = self.api.removesuffix("/api")

    def artifacts(self, flow_run_id: str) -> list:
        """Every artifact (every version) of a flow run and its task runs, oldest first."""
        from prefect.client.orchestration import PrefectClient
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
        from prefect.client.schemas.sorting import ArtifactSort

        async def read() -> list:
            async with PrefectClient(self.api) as client:
                return (
                    await client.read_artifacts(
                        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])),
                        sort=ArtifactSort.CREATED_DESC,
                    )
                )[::-1]

        return asyncio.run(read())

    def deployment(self, name: str):
        """The deployment `flow/deployment` as the server's API returns it."""
        from prefect.client.orchestration import PrefectClient

        async def read():
            async with PrefectClient(self.api) as client:
                return await client.read_deployment_by_name(name)

        return asyncio.run(read())

    def cli(self, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
        return subprocess.run([PREFECT, *args], env=self.env, cwd=REPO, capture_output=True, text=True, timeout=timeout)

    def worker_log(self) -> str:
        return (self.logs / "worker.log").read_text()


@contextlib.contextmanager
def deployed_server(root: Path) -> Iterator[Prefect]:
    """`prefect server start` on loopback, scripts/deploy.sh run against it with stdin closed, and
    scripts/worker.sh polling its pool; the worker stopped by SIGTERM and the server at the end."""
    logs = root / "prefect"
    logs.mkdir()
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(logs / "prefect_home"),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_WORKER_PREFETCH_SECONDS": "1",
        "PREFECT_RUNNER_POLL_FREQUENCY": "1",
        "ALIGNFLOW_HOME": str(REPO),
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
        "PREFECT_UI_API_URL": api,
        "ALIGNFLOW_CURVE_EVERY_S": "1",
    }
    server_env = {k: v for k, v in env.items() if k != "PREFECT_API_URL"}
    server = subprocess.Popen(
        [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=server_env,
        stdout=open(logs / "server.log", "w"),
        stderr=subprocess.STDOUT,
    )
    worker = None
    try:
        _wait_healthy(api, server)
        p = Prefect(env, logs)
        # the documented commands: checked, no prompts (stdin closed: a prompt would crash with EOFError)
        deployed = subprocess.run(
            ["bash", "scripts/deploy.sh"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        assert deployed.returncode == 0, deployed.stdout[-2000:] + deployed.stderr[-2000:]
        worker = subprocess.Popen(
            ["bash", "scripts/worker.sh"],
            env=env,
            cwd=REPO,
            stdout=open(logs / "worker.log", "w"),
            stderr=subprocess.STDOUT,
        )
        yield p
    finally:
        if worker is not None:
            stop_process(worker)  # SIGTERM, as a supervisor stops it (tested below)
        stop_process(server)


def start_worker_ignoring_sigint(prefect: Prefect, log: Path, *args: str, timeout_s: float = 120) -> subprocess.Popen:
    """`scripts/worker.sh args` started with SIGINT ignored (as `&` in a script, nohup and some supervisors start it),
    its output in `log`: returned once it logs "started", exits, or `timeout_s` passed."""
    with log.open("w") as out:
        worker = subprocess.Popen(
            ["bash", "scripts/worker.sh", *args],
            env=prefect.env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
    try:
        deadline = time.monotonic() + timeout_s
        while "started" not in log.read_text() and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
    except BaseException:
        worker.kill()
        worker.wait()
        raise
    return worker


def wait_terminal(prefect: Prefect, run_id: str, timeout_s: float = 600) -> str:
    """The flow run's final state type, read from the server's API each second (a `prefect flow-run inspect`
    process a poll cost 2-3 s of the 2 cores the run under test needs)."""
    from prefect.client.orchestration import PrefectClient

    async def state() -> str:
        async with PrefectClient(prefect.api) as client:
            return (await client.read_flow_run(run_id)).state.type.value

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = asyncio.run(state())
        if now in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return now
        time.sleep(1)
    raise AssertionError(f"flow run {run_id} still not finished after {timeout_s}s:\n{prefect.worker_log()[-3000:]}")
