"""Store outages. The persistent S3 server of the fault tests (tests/fixtures_seaweed.py): what was
committed before a stop is there after a restart on the same ports and data directory. A frozen
store (connections accepted, nothing answered) is a transient error after the read timeout."""

from __future__ import annotations

import os
import signal
import time
import uuid
from urllib.parse import urlsplit

import psutil
import pytest

from alignment import storage
from tests import fixtures_seaweed
from tests.fixtures_s3 import BUCKET, point_env_at

seaweed = fixtures_seaweed.seaweed  # the fixture: a SeaweedFS S3 server for one test

pytestmark = pytest.mark.integration


def test_seaweed_keeps_bucket_and_objects_across_a_restart(seaweed, tmp_path, monkeypatch):
    point_env_at(monkeypatch, seaweed.endpoint)
    monkeypatch.setenv("ALIGNFLOW_STORE_RETRIES", "1")  # a store that is down fails at once here
    # every listener on loopback, none on a wildcard address
    listening = [c.laddr for c in psutil.Process(seaweed.proc.pid).net_connections("tcp") if c.status == "LISTEN"]
    assert {a.port for a in listening} >= set(seaweed.ports.values())
    assert all(a.ip == "127.0.0.1" for a in listening), listening
    uri = f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/ckpt"
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "weights.bin").write_bytes(bytes(range(256)) * 4096)  # 1 MiB: several filer chunks
    (src / "sub" / "config.json").write_text('{"a": 1}')
    manifest = storage.commit_dir(src, uri, metadata={"step": 4})

    down_s = seaweed.stop()
    with pytest.raises(storage.StoreUnavailable):
        storage.read_manifest(uri)
    up_s = seaweed.start()
    assert storage.read_manifest(uri) == manifest
    got = storage.download_dir(uri, tmp_path / "back", verify=True)
    assert (got / "weights.bin").read_bytes() == (src / "weights.bin").read_bytes()
    assert (got / "sub" / "config.json").read_text() == '{"a": 1}'
    fs, _ = storage.filesystem(uri)
    assert BUCKET in [b.rstrip("/") for b in fs.ls("")]
    print(f"SeaweedFS stopped in {down_s:.1f}s, answered S3 again {up_s:.1f}s after its restart")


def test_a_frozen_store_is_a_transient_error_within_the_read_timeout(s3_root, moto_endpoint, monkeypatch):
    """The session's S3 server stopped with SIGSTOP: its kernel still accepts connections, nothing
    answers. With a 2 s read timeout, one try and one attempt, a read gives up in about 2 s with
    StoreUnavailable (exit 75 in a CLI, retried by the flow); s3fs's own retries don't multiply it.
    Without a read timeout a request would wait for as long as the server stays frozen."""
    monkeypatch.setenv("ALIGNFLOW_STORE_READ_TIMEOUT", "2")
    monkeypatch.setenv("ALIGNFLOW_STORE_RETRIES", "1")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    uri = f"{s3_root}/frozen/note.txt"
    storage.write_text_atomic(uri, "still here")
    port = urlsplit(moto_endpoint).port
    server = next(c.pid for c in psutil.net_connections("tcp") if c.status == "LISTEN" and c.laddr.port == port)
    os.kill(server, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(storage.StoreUnavailable, match="ReadTimeout") as e:
            storage.read_text(uri)
        waited = time.monotonic() - t0
    finally:
        os.kill(server, signal.SIGCONT)
    assert 2 <= waited < 6, waited
    assert "\n" not in str(e.value)
    assert storage.read_text(uri) == "still here"  # thawed: the same call works again
    print(f"frozen store: StoreUnavailable after {waited:.1f}s")
