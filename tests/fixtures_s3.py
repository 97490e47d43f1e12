"""A real S3 endpoint for tests: moto_server on a loopback port (moto.mock_aws does not work with s3fs)."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

BUCKET = "alignflow-test"
# Every test talks to S3 with this secret key (moto accepts any); tests grep logs, manifests,
# artifacts and Ray job metadata for it to prove credentials never leak.
PLANTED_SECRET = "alignflow-planted-secret-Zq81x"
# The wandb key in the session Ray cluster's environment (how a pipeline passes it: use_wandb=env)
PLANTED_WANDB_KEY = "alignflow-planted-wandb-key-7Hq2Lm0123456789abcdef"


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout_s: float = 30) -> None:
    """Stop a process the tests started, by its PID: `sig` first, SIGKILL if it lingers."""
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_port() -> int:
    """A loopback port nobody listens on right now (also used as a 'closed' endpoint)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _moto_server() -> str | None:
    local = Path(sys.executable).parent / "moto_server"
    return str(local) if local.exists() else shutil.which("moto_server")


def point_env_at(mp: pytest.MonkeyPatch, endpoint: str) -> None:
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE"):
        mp.delenv(var, raising=False)
    mp.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    mp.setenv("AWS_ACCESS_KEY_ID", "testing")
    mp.setenv("AWS_SECRET_ACCESS_KEY", PLANTED_SECRET)
    mp.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory):
    """Start moto_server once per session and create BUCKET in it; yields its endpoint URL."""
    exe = _moto_server()
    if exe is None:  # a missing test dependency is a failure, not a silent skip
        pytest.fail("moto_server not installed: run `make test` (or pip install 'alignflow[test]')")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=1).close()
                break
            except urllib.error.HTTPError:
                break  # any HTTP answer means it is up
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto_server did not come up on port {port}: {log_path.read_text()[-2000:]}")
                time.sleep(0.1)
        with pytest.MonkeyPatch.context() as mp:
            point_env_at(mp, endpoint)
            from alignment import storage

            fs, _ = storage.filesystem(f"s3://{BUCKET}")
            fs.makedirs(BUCKET, exist_ok=True)
        yield endpoint
    finally:
        stop_process(proc)


@pytest.fixture
def s3_root(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The standard AWS env vars pointed at moto for this test only; yields a fresh s3:// prefix."""
    point_env_at(monkeypatch, moto_endpoint)
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"
