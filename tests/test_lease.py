"""The output lease (alignment/lease.py) on a local path and on a real S3 server: one holder, a live
holder refuses a second writer by name, a dead one is taken over, a driver's ranks share its lease.
Two real CLIs on one output: tests/test_integrity.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from dataclasses import asdict

import pytest

from alignment import lease, storage


@pytest.fixture(autouse=True)
def _no_inherited_lease(monkeypatch):
    monkeypatch.delenv(lease.ENV, raising=False)
    yield
    lease.release_all()


def plant(output: str, **fields) -> lease.Holder:
    """A lease as another process would have left it."""
    holder = lease.Holder(
        **{
            "owner": "other",
            "host": socket.gethostname(),
            "boot": lease._boot_id(),
            "pid": 1,
            "what": "alignment.cli.train_dpo",
            "heartbeat": time.time(),
            **fields,
        }
    )
    storage.write_text_atomic(lease.lease_uri(output), json.dumps(asdict(holder)))
    return holder


def check_exclusive(output: str, monkeypatch) -> None:
    held = lease.Lease(output, "first").acquire()
    assert storage.exists(lease.lease_uri(output))
    monkeypatch.delenv(lease.ENV)  # a separate run, not one of first's ranks
    with pytest.raises(lease.LeaseHeld, match=f"{output} is being written by first \\(pid "):
        lease.Lease(output, "second").acquire()
    held.release()
    assert not storage.exists(lease.lease_uri(output))
    lease.Lease(output, "second").acquire()


def test_local_lease_is_exclusive(tmp_path, monkeypatch):
    check_exclusive(str(tmp_path / "model"), monkeypatch)
    assert lease.lease_uri(str(tmp_path / "model")) == f"{tmp_path}/.model.lease"


def test_s3_lease_is_exclusive(s3_root, monkeypatch):
    """The conditional PUT (If-None-Match: *) against the S3 server the suite starts."""
    check_exclusive(f"{s3_root}/model", monkeypatch)


def test_dead_or_stale_holders_are_taken_over(tmp_path, monkeypatch, caplog):
    out = str(tmp_path / "model")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        plant(out, pid=sleeper.pid)  # alive on this host: held
        with pytest.raises(lease.LeaseHeld, match="alignment.cli.train_dpo"):
            lease.Lease(out, "me").acquire()
    finally:
        sleeper.kill()
        sleeper.wait()
    lease.Lease(out, "me").acquire()  # its process is gone: taken over at once
    assert "taking over the lease" in caplog.text
    lease.release_all()
    plant(out, host="another-host", heartbeat=time.time())  # fresh heartbeat elsewhere: held
    with pytest.raises(lease.LeaseHeld, match="on another-host"):
        lease.Lease(out, "me").acquire()
    monkeypatch.setenv("ALIGNFLOW_LEASE_TTL_S", "5")
    plant(out, host="another-host", heartbeat=time.time() - 6)  # heartbeat older than the TTL: taken over
    got = lease.Lease(out, "me").acquire()
    assert got.holder is not None and json.loads(storage.read_text(lease.lease_uri(out)))["owner"] == got.holder.owner


def test_ranks_share_their_drivers_lease(tmp_path, monkeypatch):
    out = str(tmp_path / "model")
    driver = lease.Lease(out, "driver").acquire()
    rank = lease.Lease(out, "rank 0")  # ALIGNFLOW_LEASE is in its environment (ray_ranks passes it)
    assert rank.acquire().holder is None  # joined, not taken: the driver heartbeats and releases
    rank.release()
    assert storage.exists(lease.lease_uri(out))
    driver.release()


def test_heartbeat_refreshes_the_lease(tmp_path, monkeypatch):
    monkeypatch.setenv("ALIGNFLOW_LEASE_TTL_S", "0.4")  # a beat every 0.1 s
    out = str(tmp_path / "model")
    lease.Lease(out, "me").acquire()
    first = json.loads(storage.read_text(lease.lease_uri(out)))["heartbeat"]
    time.sleep(0.5)
    assert json.loads(storage.read_text(lease.lease_uri(out)))["heartbeat"] > first
