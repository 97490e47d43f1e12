"""alignment.storage on local paths: commit protocol, pointers, retention, retries (S3: test_storage_s3.py)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from alignment import storage
from alignment.storage import StorageError
from alignment.storage import retry as store_retry
from tests.storage_helpers import commit_steps, isolated, make_dir, tree  # noqa: F401  (isolated: autouse)


# --- local -----------------------------------------------------------------------------------------------
def test_commit_writes_manifest_with_sizes_and_hashes(tmp_path: Path) -> None:
    src = make_dir(tmp_path / "src")
    uri = str(tmp_path / "store" / "ckpt")
    manifest = storage.commit_dir(src, uri, metadata={"stage": "sft"})
    assert storage.read_manifest(uri) == manifest and storage.is_committed(uri)
    assert manifest["format"] == 1 and manifest["metadata"] == {"stage": "sft"} and manifest["created"]
    assert set(manifest["files"]) == {"config.json", "sub/weights.bin", "sub/deeper/empty"}
    for rel, info in manifest["files"].items():
        data = (src / rel).read_bytes()
        assert info == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert storage.read_manifest(f"file://{uri}") == manifest


def test_download_round_trips_bytes(tmp_path: Path) -> None:
    src = make_dir(tmp_path / "src")
    uri = f"file://{tmp_path}/store/ckpt"
    storage.commit_dir(src, uri)
    out = storage.download_dir(uri, tmp_path / "dl")
    assert tree(out) == tree(src) and storage.is_committed(str(out))
    assert storage.download_dir(uri) == tmp_path / "store" / "ckpt"  # local: used in place, no copy


def test_commit_in_place_only_hashes(tmp_path: Path) -> None:
    d = make_dir(tmp_path / "model")
    storage.commit_dir(d, str(d))
    (d / "extra.txt").write_text("new")
    manifest = storage.commit_dir(d, f"file://{d}")  # re-commit in place: old manifest is not a file entry
    assert set(manifest["files"]) == {"config.json", "sub/weights.bin", "sub/deeper/empty", "extra.txt"}
    assert [p.name for p in d.iterdir() if p.name.startswith(".")] == []  # no tmp leftovers


def test_download_of_uncommitted_dir_raises(tmp_path: Path) -> None:
    make_dir(tmp_path / "half")
    with pytest.raises(StorageError, match="MANIFEST"):
        storage.download_dir(str(tmp_path / "half"), tmp_path / "dl")
    assert storage.read_manifest(str(tmp_path / "half")) is None and not storage.is_committed(str(tmp_path / "nope"))


def test_download_detects_changed_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "store" / "ckpt")
    storage.commit_dir(make_dir(tmp_path / "src"), uri)
    Path(uri, "config.json").write_text("tampered, and longer than before")
    with pytest.raises(StorageError, match="config.json"):
        storage.download_dir(uri, tmp_path / "dl")


def test_unparsable_manifest_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / storage.MANIFEST).write_text("{not json")
    with pytest.raises(StorageError, match="not a valid manifest"):
        storage.read_manifest(str(tmp_path / "d"))


def test_a_manifest_that_is_not_utf8_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / storage.MANIFEST).write_bytes('{"files": {"caf\xe9": 1}}'.encode("latin-1"))
    with pytest.raises(StorageError) as e:
        storage.read_manifest(str(tmp_path / "d"))
    assert str(e.value) == (
        f"{tmp_path / 'd' / storage.MANIFEST}: not UTF-8 text (byte 0xe9 at offset 15); "
        f"delete it and re-commit the directory"
    )


def test_missing_s3_credentials_say_which_variables_to_set() -> None:
    from botocore.exceptions import NoCredentialsError

    def no_key() -> None:
        raise NoCredentialsError()

    with pytest.raises(
        StorageError,
        match=r"reach s3://b/x: NoCredentialsError: Unable to locate credentials; "
        r"no S3 credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET",
    ):
        store_retry.retry(no_key, "reach", "s3://b/x")


def test_set_latest_refuses_uncommitted_target(tmp_path: Path) -> None:
    parent = str(tmp_path / "ckpts")
    make_dir(tmp_path / "ckpts" / "global_step1")
    with pytest.raises(StorageError, match="MANIFEST"):
        storage.set_latest(parent, "global_step1")
    assert storage.read_text(f"{parent}/latest") is None


def test_get_latest_is_the_newest_commit_whatever_the_pointer_says(tmp_path: Path) -> None:
    parent = str(tmp_path / "ckpts")
    assert storage.get_latest(parent) is None
    commit_steps(tmp_path, parent, [1, 2])
    assert storage.get_latest(parent) == f"{parent}/global_step2"  # no pointer: newest committed
    storage.set_latest(parent, "global_step1")  # a pointer one behind (killed before its update)
    assert storage.read_text(f"{parent}/latest") == "global_step1"
    assert storage.get_latest(parent) == f"{parent}/global_step2"
    storage.remove(f"{parent}/global_step2")
    assert storage.get_latest(parent) == f"{parent}/global_step1"
    # a half-written newer checkpoint (files, no MANIFEST), even pointed at, is not the newest commit
    make_dir(tmp_path / "ckpts" / "global_step3")
    (tmp_path / "ckpts" / "latest").write_text("global_step3")
    assert storage.get_latest(parent) == f"{parent}/global_step1"


def test_list_committed_natural_order_and_prefix(tmp_path: Path) -> None:
    parent = str(tmp_path / "ckpts")
    commit_steps(tmp_path, parent, [10, 2, 9])
    storage.commit_dir(make_dir(tmp_path / "other"), f"{parent}/final")
    assert storage.list_committed(parent, "global_step") == ["global_step2", "global_step9", "global_step10"]
    assert storage.list_committed(parent) == ["final", "global_step2", "global_step9", "global_step10"]
    assert storage.list_committed(str(tmp_path / "missing")) == []


def test_apply_retention_keeps_newest_and_latest_target(tmp_path: Path) -> None:
    parent = str(tmp_path / "ckpts")
    commit_steps(tmp_path, parent, [1, 2, 4, 5, 6])
    make_dir(tmp_path / "ckpts" / "global_step3")  # leftover of a crashed write
    make_dir(tmp_path / "ckpts" / "global_step7")  # a write in progress
    storage.set_latest(parent, "global_step2")
    assert storage.apply_retention(parent, keep=0) == []
    deleted = storage.apply_retention(parent, keep=2)
    assert sorted(deleted) == ["global_step1", "global_step3", "global_step4"]
    assert storage.list_committed(parent) == ["global_step2", "global_step5", "global_step6"]
    assert (tmp_path / "ckpts" / "global_step7").is_dir() and (tmp_path / "ckpts" / "latest").is_file()


def test_apply_retention_by_size_drops_the_oldest_and_keeps_the_newest(tmp_path: Path) -> None:
    """--max_ckpt_mem: each of these checkpoints holds ~3 kB (make_dir); within 7 kB two fit, within 1 kB only the
    newest stays (never deleted, whatever the limit)."""
    parent = str(tmp_path / "ckpts")
    commit_steps(tmp_path, parent, [1, 2, 3, 4])
    assert storage.apply_retention(parent, keep=3, max_bytes=7000) == ["global_step1", "global_step2"]
    assert storage.apply_retention(parent, keep=3, max_bytes=1000) == ["global_step3"]
    assert storage.list_committed(parent) == ["global_step4"]
    commit_steps(tmp_path, parent, [5, 6, 7])
    storage.set_latest(parent, "global_step5", pointer=storage.BEST)  # --best_metric_key's: never deleted
    assert storage.apply_retention(parent, keep=1) == ["global_step4", "global_step6"]
    assert storage.list_committed(parent) == ["global_step5", "global_step7"]


def test_crash_mid_commit_is_invisible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALIGNFLOW_STORE_THREADS", "1")  # one upload at a time: the call counts below are exact
    parent = str(tmp_path / "ckpts")
    commit_steps(tmp_path, parent, [1, 2])
    storage.set_latest(parent, "global_step2")
    fs, _ = storage.filesystem(parent)
    calls = []

    def dies_after_one(src: str, dst: str, **kw) -> None:
        calls.append(dst)
        if len(calls) > 1:
            raise PermissionError(13, "disk gone")  # permanent: no retries
        type(fs).put_file(fs, src, dst, **kw)

    monkeypatch.setattr(fs, "put_file", dies_after_one)
    with pytest.raises(StorageError, match="global_step3"):
        storage.commit_dir(make_dir(tmp_path / "new"), f"{parent}/global_step3")
    with pytest.raises(StorageError):  # a re-commit over step2 first removes its manifest
        storage.commit_dir(make_dir(tmp_path / "new"), f"{parent}/global_step2")
    assert len(calls) == 3  # step3: one upload + the failing one; step2: fails at once
    assert storage.list_committed(parent) == ["global_step1"]
    assert storage.get_latest(parent) == f"{parent}/global_step1"
    with pytest.raises(StorageError):
        storage.set_latest(parent, "global_step3")


def test_store_jobs_run_at_once_in_order_and_the_first_failure_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    meet = threading.Barrier(3, timeout=10)  # passes only when three jobs run at the same time
    assert store_retry.run_all([lambda i=i: (meet.wait(), i)[1] for i in range(3)]) == [0, 1, 2]

    def fails() -> None:
        raise StorageError("upload s3://b/k: denied")

    started = []
    with pytest.raises(StorageError, match="denied"):
        store_retry.run_all([fails] + [lambda: started.append(1) or time.sleep(0.01)] * 30)
    assert len(started) < 30  # the queue stopped at the failure
    monkeypatch.setenv("ALIGNFLOW_STORE_THREADS", "1")
    assert store_retry.run_all([lambda: threading.current_thread().name]) == [threading.current_thread().name]


def test_text_and_remove(tmp_path: Path) -> None:
    uri = str(tmp_path / "a" / "b.txt")
    assert storage.read_text(uri) is None
    storage.write_text_atomic(uri, "one")
    storage.write_text_atomic(uri, "two")
    assert storage.read_text(uri) == "two" and os.listdir(tmp_path / "a") == ["b.txt"]
    storage.remove(uri)
    storage.remove(uri)
    storage.remove(str(tmp_path / "never"))
    assert storage.read_text(uri) is None


def test_retry_transient_then_give_up(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionRefusedError(111, "Connection refused")
        return "ok"

    assert store_retry.retry(flaky, "read", "s3://b/x") == "ok" and len(calls) == 3
    monkeypatch.setenv("ALIGNFLOW_STORE_RETRIES", "2")
    calls.clear()
    with pytest.raises(storage.StoreUnavailable, match=r"^read s3://b/x: .*reachable"):  # transient: exit 75
        store_retry.retry(lambda: flaky() and "", "read", "s3://b/x")
    assert len(calls) == 2
    calls.clear()
    with pytest.raises(StorageError, match="does not exist") as permanent:  # one try, exit 2
        store_retry.retry(lambda: calls.append(1) or open("/nonexistent/x"), "read", "/nonexistent/x")
    assert not isinstance(permanent.value, storage.StoreUnavailable)
    assert len(calls) == 1
    with pytest.raises(ZeroDivisionError):  # bugs keep their type
        store_retry.retry(lambda: 1 / 0, "read", "x")
