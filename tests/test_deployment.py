"""`prefect deployment run 'sft/tiny'` against a real Prefect server and process worker."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.fixtures_s3 import free_port, stop_process

pytestmark = pytest.mark.integration
PREFECT = str(Path(sys.executable).parent / "prefect")


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


def test_deployment_run_completes_and_lists_artifacts(ray_head, tmp_path):
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect_home"), "PREFECT_API_URL": api,
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_WORKER_QUERY_SECONDS": "1",
           "PREFECT_WORKER_PREFETCH_SECONDS": "1", "PREFECT_RUNNER_POLL_FREQUENCY": "1", "ALIGNFLOW_HOME": str(REPO)}
    server_env = {k: v for k, v in env.items() if k != "PREFECT_API_URL"}
    server = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                              env=server_env, stdout=open(tmp_path / "server.log", "w"), stderr=subprocess.STDOUT)
    worker = None
    try:
        _wait_healthy(api, server)

        def cli(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
            return subprocess.run([PREFECT, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)

        assert cli("work-pool", "create", "alignflow", "--type", "process").returncode == 0
        deployed = cli("--no-prompt", "deploy", "--all", "--prefect-file", "deployments/prefect.yaml")
        assert deployed.returncode == 0, deployed.stdout[-2000:] + deployed.stderr[-2000:]
        worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "alignflow"], env=env, cwd=REPO,
                                  stdout=open(tmp_path / "worker.log", "w"), stderr=subprocess.STDOUT)
        sft = json.dumps({"max_steps": 4, "eval_dataset": None, "save_steps": 2, "logging_steps": 1})
        run = cli("deployment", "run", "sft/tiny", "--param", f"ray_address={ray_head}",
                  "--param", f"store={tmp_path / 'store'}", "--param", f"sft={sft}", "--watch", timeout=600)
        worker_log = (tmp_path / "worker.log").read_text()
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:] + worker_log[-3000:]
        assert "Completed" in run.stdout
        listed = cli("artifact", "ls")
        assert listed.returncode == 0, listed.stderr
        for key in ("tiny-sft-model", "tiny-sft-metrics", "tiny-sft-curve"):
            assert key in listed.stdout, listed.stdout
        assert list((tmp_path / "store" / "tiny").glob("sft-*/model/MANIFEST.json"))
    finally:
        if worker is not None:
            stop_process(worker, signal.SIGINT)  # workers ignore SIGTERM for 40 s+
        stop_process(server)
