"""The output lease (alignment/lease.py) on a local path and on a real S3 server: one holder, a live
holder refuses a second writer by name, a dead one is taken over, a driver's ranks share its lease, and
a holder that was taken over commits nothing (the fence). Two real CLIs on one output and a stopped
real CLI: tests/test_integrity.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from dataclasses import asdict

import pytest

from alignment import lease, outputs, storage


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
    assert "took over the lease" in caplog.text
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


def test_a_live_holder_on_this_host_is_never_taken_over(tmp_path, monkeypatch):
    """Ctrl-Z or a Slurm suspend stops the heartbeat, not the process: its lease stays, however stale."""
    out = str(tmp_path / "model")
    monkeypatch.setenv("ALIGNFLOW_LEASE_TTL_S", "5")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        plant(out, pid=sleeper.pid, heartbeat=time.time() - 3600, started=lease._started(sleeper.pid))
        with pytest.raises(lease.LeaseHeld, match="last heartbeat 3600 s ago"):
            lease.Lease(out, "me").acquire()
        plant(out, pid=sleeper.pid, heartbeat=time.time(), started="1")  # the pid now names another process
        assert lease.Lease(out, "me").acquire().holder is not None
    finally:
        sleeper.kill()
        sleeper.wait()


def check_fence(output: str, monkeypatch) -> None:
    """Taken over while it was away: the heartbeat leaves the new holder's lease alone and a commit refuses."""
    monkeypatch.setenv("ALIGNFLOW_LEASE_TTL_S", "0.4")  # a beat every 0.1 s
    mine = lease.Lease(output, "me").acquire()
    with lease.fenced(f"{output}/checkpoints/global_step1"):  # held: commits go ahead
        pass
    taker = plant(output, host="another-host", owner="taker")  # what a takeover from another host writes
    time.sleep(0.5)
    assert json.loads(storage.read_text(lease.lease_uri(output)))["owner"] == "taker"
    with outputs.StagedOutput(output) as staged:
        assert staged.dir is not None
        (staged.dir / "weights.txt").write_text("from the run that lost its lease")
        with pytest.raises(lease.LeaseLost, match="taken over by alignment.cli.train_dpo \\(pid 1 on another-host"):
            staged.commit({})
    assert not storage.is_committed(output)  # on S3 its uploads may lie there, named by no manifest
    assert "another-host" in lease.lost(f"{output}/x") and lease.lost("/elsewhere") == ""
    mine.release()  # not ours any more: left in place
    assert json.loads(storage.read_text(lease.lease_uri(output)))["owner"] == taker.owner


def test_a_taken_over_holder_commits_nothing_locally(tmp_path, monkeypatch):
    check_fence(str(tmp_path / "model"), monkeypatch)


def test_a_taken_over_holder_commits_nothing_on_s3(s3_root, monkeypatch):
    """If-Match on the lease's ETag, against the S3 server the suite starts."""
    check_fence(f"{s3_root}/model", monkeypatch)


def test_one_of_two_takers_wins(tmp_path, monkeypatch):
    """Two runs taking over one dead lease: the replace is conditional, so the second finds the first's."""
    out = str(tmp_path / "model")
    dead = plant(out, pid=2**22 + 7)  # no such process
    text, tag = lease.conditional.read_tagged(lease.lease_uri(out))
    assert lease._parse(text) == dead
    first = lease.Lease(out, "first").acquire()
    assert first.holder is not None
    assert not lease.conditional.replace(lease.lease_uri(out), "{}", tag)  # the second taker's stale view
    monkeypatch.delenv(lease.ENV)
    with pytest.raises(lease.LeaseHeld, match="being written by first"):
        lease.Lease(out, "second").acquire()
