"""alignment.storage on a real S3 (the session's moto_server): the same protocol as on local paths,
versions switched atomically, and an unreachable endpoint failing fast without its secret."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from alignment import storage
from alignment.storage import StorageError
from tests.fixtures_s3 import free_port
from tests.storage_helpers import commit_steps, isolated, make_dir, tree  # noqa: F401  (isolated: autouse)


def test_s3_commit_download_round_trip(tmp_path: Path, s3_root: str) -> None:
    src = make_dir(tmp_path / "src")
    uri = f"{s3_root}/model"
    assert storage.read_manifest(uri) is None
    with pytest.raises(StorageError, match="MANIFEST"):
        storage.download_dir(uri)
    manifest = storage.commit_dir(src, uri, {"stage": "rm"})
    assert storage.read_manifest(uri) == manifest and storage.is_committed(uri)
    assert tree(storage.download_dir(uri, tmp_path / "dl")) == tree(src)
    cached = storage.download_dir(uri)
    assert cached.is_relative_to(tmp_path / "cache") and tree(cached) == tree(src)
    (cached / "marker").write_text("still here")
    assert storage.download_dir(uri) == cached and (cached / "marker").exists()  # cache reused
    storage.commit_dir(make_dir(tmp_path / "src2", "y"), uri)  # new content: cache refreshed
    again = storage.download_dir(uri)
    assert tree(again) == tree(tmp_path / "src2") and not (again / "marker").exists()


def test_s3_recommit_keeps_the_old_version_committed_until_the_switch(
    tmp_path: Path, s3_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"{s3_root}/recommitted"
    fs, path = storage.filesystem(uri)
    storage.commit_dir(make_dir(tmp_path / "v1", "one"), uri)
    fs.pipe_file(f"{path}/v-19990101T000000-dead0000/config.json", b"a crashed commit's upload")
    seen: list[dict[str, bytes]] = []
    import itertools

    readers = itertools.count()  # uploads run in parallel: each reader its own folder

    def put_and_look(src: str, dst: str, **kw) -> None:  # a reader in the middle of the new upload
        assert storage.is_committed(uri)
        seen.append(tree(storage.download_dir(uri, tmp_path / f"mid{next(readers)}")))
        type(fs).put_file(fs, src, dst, **kw)

    with monkeypatch.context() as patch:
        patch.setattr(fs, "put_file", put_and_look)
        manifest = storage.commit_dir(make_dir(tmp_path / "v2", "two"), uri)
    assert len(seen) == 3 and all(t == tree(tmp_path / "v1") for t in seen)  # the old model, whole, every time
    root = manifest["root"]
    assert root.startswith("v-") and storage.read_manifest(uri) == manifest
    assert tree(storage.download_dir(uri, tmp_path / "after")) == tree(tmp_path / "v2")
    left = sorted(p.removeprefix(path + "/") for p in fs.find(path))
    assert left == sorted([storage.MANIFEST] + [f"{root}/{rel}" for rel in manifest["files"]])  # old files gone
    assert storage.read_text(storage.file_in(uri, "config.json")) == json.dumps({"seed": "two"})
    third = storage.commit_dir(make_dir(tmp_path / "v3", "three"), uri)  # version to version
    assert third["root"] != root and not fs.exists(f"{path}/{root}")
    assert tree(storage.download_dir(uri, tmp_path / "third")) == tree(tmp_path / "v3")


def test_s3_latest_pointer_and_retention(tmp_path: Path, s3_root: str) -> None:
    parent = f"{s3_root}/ckpts"
    commit_steps(tmp_path, parent, [1, 2, 10])
    fs, path = storage.filesystem(parent)
    fs.pipe_file(f"{path}/global_step3/leftover.bin", b"crashed")  # uploaded, never committed
    fs.pipe_file(f"{path}/global_step11/part.bin", b"in progress")
    assert storage.list_committed(parent, "global_step") == ["global_step1", "global_step2", "global_step10"]
    assert storage.get_latest(parent) == f"{parent}/global_step10"
    with pytest.raises(StorageError, match="MANIFEST"):
        storage.set_latest(parent, "global_step3")
    storage.set_latest(parent, "global_step1")
    assert storage.get_latest(parent) == f"{parent}/global_step10"  # the newest commit, not the pointer
    assert sorted(storage.apply_retention(parent, keep=1)) == ["global_step2", "global_step3"]
    assert storage.list_committed(parent) == ["global_step1", "global_step10"]
    assert fs.exists(f"{path}/global_step11/part.bin") and not fs.exists(f"{path}/global_step3/leftover.bin")
    storage.remove(f"{parent}/global_step1")
    assert storage.get_latest(parent) == f"{parent}/global_step10"


def test_s3_missing_bucket_is_an_error(s3_root: str) -> None:
    with pytest.raises(StorageError, match="bucket does not exist"):
        storage.read_manifest("s3://no-such-bucket-af/x")


def test_s3_unreachable_endpoint_fails_fast_without_leaking_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "planted-secret-XYZ")
    monkeypatch.setenv("ALIGNFLOW_STORE_RETRIES", "2")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    uri = "s3://alignflow-test/unreachable/global_step1"
    t0 = time.monotonic()
    with pytest.raises(StorageError) as info:
        storage.read_manifest(uri)
    with pytest.raises(StorageError) as info2:
        storage.commit_dir(make_dir(tmp_path / "src"), uri)
    assert time.monotonic() - t0 < 15
    for err in (info.value, info2.value):
        msg = str(err)
        assert uri in msg and "reachable" in msg and "\n" not in msg
        assert "planted-secret-XYZ" not in msg and "planted-secret-XYZ" not in repr(err.__cause__)
