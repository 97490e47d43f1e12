"""Checkpoint directories in object storage (local paths, file://, s3://) via fsspec.

A directory counts as *committed* only once its MANIFEST.json exists; the manifest is written last,
so a crash mid-upload leaves a directory every reader ignores. Re-committing over a committed
object-store directory never uncommits it: the new files go to a fresh version folder
(`<uri>/v-<time>-<id>/`, named by the manifest's "root"), the one PUT of the new MANIFEST.json
switches readers over, and only then are the old files deleted (S3 has no directory rename).
S3 endpoint and credentials come from the standard AWS environment (AWS_ENDPOINT_URL_S3,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...) so the same code runs against a real S3 unchanged.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any, Callable, TypeVar

import fsspec
from fsspec.core import split_protocol

from alignment.store_retry import StorageError, StoreUnavailable, _missing_bucket, _one_line, _retry

T = TypeVar("T")
__all__ = ["StorageError", "StoreUnavailable"]   # the store's errors, importable from here as before

MANIFEST = "MANIFEST.json"
LATEST = "latest"
_LOCAL = (None, "file", "local")


def is_remote(uri: str | Path) -> bool:
    """True for object-store URIs (s3://, gs://, ...): callers then need a local staging copy."""
    return split_protocol(str(uri))[0] not in _LOCAL


READ_TIMEOUT_S = 60.0   # ALIGNFLOW_STORE_READ_TIMEOUT overrides (seconds)


def read_timeout_s() -> float:
    return float(os.environ.get("ALIGNFLOW_STORE_READ_TIMEOUT", READ_TIMEOUT_S))


def filesystem(uri: str | Path) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for `uri` and the path inside it (absolute for local paths).

    botocore already reads AWS_ENDPOINT_URL_S3, but we pass it explicitly too so that fsspec's
    instance cache (keyed by these kwargs) hands out a new client when the endpoint changes."""
    protocol, path = split_protocol(str(uri))
    if protocol in _LOCAL:
        return fsspec.filesystem("file", auto_mkdir=True), os.path.abspath(os.path.expanduser(path))
    kwargs: dict[str, Any] = {}
    if protocol in ("s3", "s3a"):
        protocol = "s3"
        # a store that accepts connections but stops answering (frozen, overloaded) must end as a
        # transient error, not a hang: each request waits this long for a response (s3fs's own default: 15 s)
        config: dict[str, Any] = {"connect_timeout": 10, "read_timeout": read_timeout_s()}
        if not (os.environ.get("AWS_MAX_ATTEMPTS") or os.environ.get("AWS_RETRY_MODE")):
            config["retries"] = {"mode": "standard", "total_max_attempts": 3}  # _retry is the outer policy
        # no listings cache: other processes (trainer, flow, retention) change the same prefixes
        kwargs = {"use_listings_cache": False, "config_kwargs": config}
        if os.environ.get("AWS_ENDPOINT_URL_S3"):
            kwargs["client_kwargs"] = {"endpoint_url": os.environ["AWS_ENDPOINT_URL_S3"]}
    fs = fsspec.filesystem(protocol, **kwargs)
    if protocol == "s3":
        # s3fs retries a timed-out or cut-off request 5 times itself, each time with botocore's 3
        # attempts: 15 read timeouts per try of _retry, 75 per call. Two layers are enough:
        # botocore per request, _retry per operation (a frozen store gives up in tries x 3 x read timeout).
        fs.retries = 1
    return fs, fs._strip_protocol(str(uri)).rstrip("/")


def _join(uri: str | Path, name: str) -> str:
    return f"{str(uri).rstrip('/')}/{name}"


def read_text(uri: str | Path) -> str | None:
    """The file's text, or None when it does not exist (a missing bucket is still an error)."""
    fs, path = filesystem(uri)

    def read() -> bytes | None:
        try:
            return fs.cat_file(path)
        except FileNotFoundError as e:
            if _missing_bucket(e):
                raise
            return None
    data = _retry(read, "read", uri)
    try:
        return None if data is None else data.decode("utf-8")
    except UnicodeDecodeError as e:   # damaged, or not written by us: a one-line error, not a traceback
        fix = "delete it and re-commit the directory" if str(uri).endswith(MANIFEST) else "save it as UTF-8"
        raise StorageError(f"{uri}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); {fix}") from None


def write_text_atomic(uri: str | Path, text: str) -> None:
    """Readers see the old text or the new one, never a torn file: tmp + os.replace locally, one PUT on S3."""
    fs, path = filesystem(uri)
    data = text.encode("utf-8")
    if is_remote(uri):
        _retry(lambda: fs.pipe_file(path, data), "write", uri)
        fs.invalidate_cache(os.path.dirname(path))
        return

    def write() -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    _retry(write, "write", uri)


def retry_call(fn: Callable[[], T], what: str, uri: str | Path) -> T:
    """A store call of the caller's own, under the same retry policy and error types as every other."""
    return _retry(fn, what, uri)


def fetch_file(uri: str | Path, dest: str | Path) -> None:
    """Copy one file from the store to a local path (transient errors retried)."""
    fs, path = filesystem(uri)
    _retry(lambda: fs.get_file(path, str(dest)), "download", uri)


def list_files(uri: str | Path) -> list[str]:
    """Paths, relative to `uri`, of every file under it (empty when there is nothing there)."""
    fs, path = filesystem(uri)
    return [key[len(path):].lstrip("/") for key in _retry(lambda: fs.find(path), "list", uri)]


def remove(uri: str | Path) -> None:
    """Delete a file or a directory tree; missing is fine. The manifest goes first, so a crash
    mid-delete leaves an uncommitted (ignored) directory rather than a committed, broken one."""
    fs, path = filesystem(uri)

    def rm() -> None:
        for target, recursive in ((f"{path}/{MANIFEST}", False), (path, True)):
            try:
                fs.rm(target, recursive=recursive)
            except (FileNotFoundError, NotADirectoryError) as e:  # uri may be a file (or absent)
                if _missing_bucket(e):
                    raise
    _retry(rm, "delete", uri)
    fs.invalidate_cache()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(uri: str | Path) -> dict | None:
    """The directory's manifest, or None when it was never committed (or is still being written)."""
    text = read_text(_join(uri, MANIFEST))
    if text is None:
        return None
    try:
        manifest = json.loads(text)
        if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
            raise ValueError("no 'files' mapping")
        if not re.fullmatch(r"(v-[\w.-]+)?", manifest.get("root", "")):
            raise ValueError(f"root {manifest['root']!r} is not a version folder name")
    except ValueError as e:
        raise StorageError(f"{_join(uri, MANIFEST)} is not a valid manifest ({_one_line(str(e))}); "
                           f"delete it and re-commit the directory") from e
    return manifest


def _files_root(uri: str | Path, manifest: dict) -> str:
    """Where the manifest's files are: the directory itself, or its current version folder."""
    return _join(uri, manifest["root"]) if manifest.get("root") else str(uri).rstrip("/")


def file_in(dir_uri: str | Path, rel: str) -> str:
    """URI of file `rel` of the committed directory at dir_uri (inside its version folder, if any)."""
    manifest = read_manifest(dir_uri)
    return _join(_files_root(dir_uri, manifest) if manifest else dir_uri, rel)


def exists(uri: str | Path) -> bool:
    """True when a file or directory is at `uri` (transient store errors retried)."""
    fs, path = filesystem(uri)
    return _retry(lambda: fs.exists(path), "check", uri)


def is_committed(uri: str | Path) -> bool:
    """True once the directory's MANIFEST.json exists (cheap: no parse)."""
    fs, path = filesystem(uri)
    return _retry(lambda: fs.exists(f"{path}/{MANIFEST}"), "check", uri)


def commit_dir(local_dir: str | Path, uri: str | Path, metadata: dict | None = None) -> dict:
    """Upload every file under local_dir to uri, then write uri/MANIFEST.json last; returns the manifest
    (alignment/store_commit.py)."""
    from alignment.store_commit import commit_dir as commit
    return commit(local_dir, uri, metadata)


def new_version() -> str:
    from alignment.store_commit import new_version as version
    return version()


def upload_files(local_dir: str | Path, uri: str | Path, root: str, prefix: str = "") -> dict:
    """One process's part of a directory committed by several (alignment/store_commit.py)."""
    from alignment.store_commit import upload_files as upload
    return upload(local_dir, uri, root, prefix)


def commit_parts(uri: str | Path, root: str, entries: dict, metadata: dict | None = None) -> dict:
    """The manifest over every process's upload_files part (alignment/store_commit.py)."""
    from alignment.store_commit import commit_parts as commit
    return commit(uri, root, entries, metadata)


def download_dir(uri: str | Path, local_dir: str | Path | None = None, verify: bool = True) -> Path:
    """A verified local copy of the committed directory at uri (alignment/store_download.py)."""
    from alignment.store_download import download_dir as download
    return download(uri, local_dir, verify)


def _natural_key(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _children(parent_uri: str | Path, prefix: str) -> list[str]:
    """Names of the subdirectories of parent starting with prefix, natural order."""
    fs, path = filesystem(parent_uri)

    def ls() -> list[dict]:
        try:
            return fs.ls(path, detail=True)
        except FileNotFoundError as e:
            if _missing_bucket(e):
                raise
            return []
    names = {e["name"].rstrip("/").rsplit("/", 1)[-1] for e in _retry(ls, "list", parent_uri)
             if e.get("type") == "directory"}
    return sorted((n for n in names if n.startswith(prefix)), key=_natural_key)


def list_committed(parent_uri: str | Path, prefix: str = "") -> list[str]:
    """Child directory names under parent that have a manifest, oldest first (global_step9 < global_step10)."""
    return [n for n in _children(parent_uri, prefix) if is_committed(_join(parent_uri, n))]


def set_latest(parent_uri: str | Path, name: str) -> None:
    """Point parent/latest at child `name`; refused unless that child is committed, so the
    pointer can never name a half-written checkpoint."""
    if not name or "/" in name or name in (".", ".."):
        raise StorageError(f"set_latest {parent_uri}: {name!r} is not a child directory name; pass e.g. 'global_step10'")
    if not is_committed(_join(parent_uri, name)):
        raise StorageError(f"set_latest {parent_uri}: {_join(parent_uri, name)} has no {MANIFEST}; "
                           f"commit it with commit_dir() before pointing 'latest' at it")
    write_text_atomic(_join(parent_uri, LATEST), name)


def _pointer(parent_uri: str | Path) -> str | None:
    text = read_text(_join(parent_uri, LATEST))
    name = text.strip() if text else ""
    return name if name and "/" not in name and name not in (".", "..") else None


def get_latest(parent_uri: str | Path, prefix: str = "") -> str | None:
    """URI of the checkpoint to resume from: the newest committed child (with `prefix`), None if none.
    Not the `latest` pointer: a run killed between a commit and the pointer's update leaves the
    pointer one checkpoint behind, and every reader (trainers, the stage task's log line, tests) must
    agree on one answer. The pointer is still written, for people and DeepSpeed-style tools."""
    committed = list_committed(parent_uri, prefix)
    return _join(parent_uri, committed[-1]) if committed else None


def apply_retention(parent_uri: str | Path, keep: int, prefix: str = "global_step") -> list[str]:
    """Delete all but the newest `keep` committed children with `prefix` (keep <= 0: delete nothing),
    plus uncommitted leftovers older than the newest committed one. Never the `latest` target.
    Uncommitted children newer than that may be writes in progress and stay. Returns deleted names."""
    if keep <= 0:
        return []
    children = _children(parent_uri, prefix)
    committed = [n for n in children if is_committed(_join(parent_uri, n))]
    if not committed:
        return []
    newest, protected = _natural_key(committed[-1]), _pointer(parent_uri)
    doomed = [n for n in children if n != protected and (
        (n in committed and n not in committed[-keep:]) or (n not in committed and _natural_key(n) < newest))]
    for n in doomed:
        remove(_join(parent_uri, n))
    return doomed


def check_reachable(uri: str | Path) -> None:
    """One cheap request to the store (retried like any other) so a wrong endpoint, bucket or
    credential fails early with the URI in the message. Local paths are always reachable."""
    if not is_remote(uri):
        return
    fs, path = filesystem(uri)
    bucket = path.split("/", 1)[0]
    # `ls` raises on a refused connection or a bad key (`exists` would just say False)
    _retry(lambda: fs.ls(bucket, refresh=True), "reach", uri)
