"""The persistent S3 server of the fault tests (tests/fixtures_seaweed.py): what was committed
before a stop is there after a restart on the same ports and data directory."""
from __future__ import annotations

import uuid

import psutil
import pytest

from alignment import storage
from tests.fixtures_s3 import BUCKET, point_env_at
from tests import fixtures_seaweed

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
    (src / "weights.bin").write_bytes(bytes(range(256)) * 4096)   # 1 MiB: several filer chunks
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
