"""Checkpoint directories in object storage (local paths, file://, s3://) via fsspec.

A directory counts as *committed* only once its MANIFEST.json exists. The manifest is written last
(and removed first on a re-commit), so a crash mid-upload leaves a directory every reader ignores.
S3 endpoint and credentials come from the standard AWS environment (AWS_ENDPOINT_URL_S3,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...) so the same code runs against a real S3 unchanged.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, TypeVar

import fsspec
from fsspec.core import split_protocol

from alignment.errors import TransientError

try:  # botocore comes with s3fs; local-only use works without it
    from botocore.exceptions import BotoCoreError, ClientError, ConnectionError as _BotoConnError, HTTPClientError
except ImportError:  # pragma: no cover
    BotoCoreError = ClientError = _BotoConnError = HTTPClientError = ()  # type: ignore[assignment,misc]

MANIFEST = "MANIFEST.json"
LATEST = "latest"
DEFAULT_TRIES = 5  # ALIGNFLOW_STORE_RETRIES overrides; waits 0.2, 0.4, 0.8, 1.6 s between tries
BACKOFF_S = 0.2
_LOCAL = (None, "file", "local")
_TRANSIENT_CODES = {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling",
                    "ThrottlingException", "503", "500", "502", "504"}
_TRANSIENT_ERRNOS = {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT,
                     errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EPIPE, errno.EBUSY, getattr(errno, "EREMOTEIO", -1)}
T = TypeVar("T")


class StorageError(RuntimeError):
    """A store operation failed for good; the one-line message names the URI and what to do about it."""


class StoreUnavailable(StorageError, TransientError):
    """The store stayed unreachable or overloaded through every retry: worth running again later."""


def is_remote(uri: str | Path) -> bool:
    """True for object-store URIs (s3://, gs://, ...): callers then need a local staging copy."""
    return split_protocol(str(uri))[0] not in _LOCAL


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
        config: dict[str, Any] = {"connect_timeout": 10}
        if not (os.environ.get("AWS_MAX_ATTEMPTS") or os.environ.get("AWS_RETRY_MODE")):
            config["retries"] = {"mode": "standard", "total_max_attempts": 3}  # _retry is the outer policy
        # no listings cache: other processes (trainer, flow, retention) change the same prefixes
        kwargs = {"use_listings_cache": False, "config_kwargs": config}
        if os.environ.get("AWS_ENDPOINT_URL_S3"):
            kwargs["client_kwargs"] = {"endpoint_url": os.environ["AWS_ENDPOINT_URL_S3"]}
    fs = fsspec.filesystem(protocol, **kwargs)
    return fs, fs._strip_protocol(str(uri)).rstrip("/")


def _join(uri: str | Path, name: str) -> str:
    return f"{str(uri).rstrip('/')}/{name}"


def _one_line(text: str) -> str:
    """Collapse to one line and scrub anything secret-looking that a library put in an error."""
    text = " ".join(str(text).split())
    for var in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        if os.environ.get(var):
            text = text.replace(os.environ[var], "***")
    return re.sub(r"//[^/@\s]+@", "//***@", text)  # user:password@host in endpoint URLs


def _chain(e: BaseException | None):
    for _ in range(8):  # an exception and what it was raised from (bounded: chains can loop)
        if e is None:
            return
        yield e
        e = e.__cause__ or e.__context__


def _missing_bucket(e: BaseException) -> bool:
    return any("NoSuchBucket" in repr(getattr(x, "response", "")) or "bucket does not exist" in str(x).lower()
               for x in _chain(e))


def _is_transient(e: BaseException) -> bool:
    """Worth retrying: the store is unreachable or overloaded, not wrong about what we asked."""
    if isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)):
        return False
    for x in _chain(e):
        if isinstance(x, (ConnectionError, TimeoutError, _BotoConnError, HTTPClientError)):
            return True
        resp = getattr(x, "response", None)
        if isinstance(resp, dict):
            status = resp.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
            if status >= 500 or resp.get("Error", {}).get("Code") in _TRANSIENT_CODES:
                return True
        if isinstance(x, OSError) and x.errno in _TRANSIENT_ERRNOS:
            return True
    return False


def _fix(e: BaseException) -> str:
    if _missing_bucket(e):
        return "the bucket does not exist; create it or fix the URI"
    if isinstance(e, FileNotFoundError):
        return "the path does not exist; check the URI"
    if isinstance(e, PermissionError):
        return "access denied; check the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and policy"
    return "check the URI and the store"


def _retry(fn: Callable[[], T], what: str, uri: str | Path) -> T:
    """Run fn, retrying transient store errors with exponential backoff; store errors become StorageError."""
    tries = max(1, int(os.environ.get("ALIGNFLOW_STORE_RETRIES", DEFAULT_TRIES)))
    for attempt in range(tries):
        try:
            return fn()
        except Exception as e:
            transient = _is_transient(e)
            if not transient and not isinstance(e, (OSError, BotoCoreError, ClientError)):
                raise  # a bug, not a store problem: keep its type and traceback
            if transient and attempt + 1 < tries:
                time.sleep(BACKOFF_S * 2**attempt)
                continue
            fix = _fix(e)
            if transient:
                where = f" (AWS_ENDPOINT_URL_S3={os.environ.get('AWS_ENDPOINT_URL_S3', 'unset')})" if is_remote(uri) else ""
                fix = f"failed {tries} times; check that the store is reachable{where} and retry"
            error = StoreUnavailable if transient else StorageError
            raise error(_one_line(f"{what} {uri}: {type(e).__name__}: {e}; {fix}")) from e
    raise AssertionError("unreachable")  # pragma: no cover


def read_text(uri: str | Path) -> str | None:
    """The file's text, or None when it does not exist (a missing bucket is still an error)."""
    fs, path = filesystem(uri)

    def read() -> str | None:
        try:
            return fs.cat_file(path).decode("utf-8")
        except FileNotFoundError as e:
            if _missing_bucket(e):
                raise
            return None
    return _retry(read, "read", uri)


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
    except ValueError as e:
        raise StorageError(f"{_join(uri, MANIFEST)} is not a valid manifest ({_one_line(str(e))}); "
                           f"delete it and re-commit the directory") from e
    return manifest


def exists(uri: str | Path) -> bool:
    """True when a file or directory is at `uri` (transient store errors retried)."""
    fs, path = filesystem(uri)
    return _retry(lambda: fs.exists(path), "check", uri)


def is_committed(uri: str | Path) -> bool:
    """True once the directory's MANIFEST.json exists (cheap: no parse)."""
    fs, path = filesystem(uri)
    return _retry(lambda: fs.exists(f"{path}/{MANIFEST}"), "check", uri)


def commit_dir(local_dir: str | Path, uri: str | Path, metadata: dict | None = None) -> dict:
    """Upload every file under local_dir to uri, then write uri/MANIFEST.json last; returns the manifest.

    When uri is local_dir itself (a local save path) nothing is copied: the files are hashed in place."""
    src = Path(local_dir)
    if not src.is_dir():
        raise StorageError(f"commit {uri}: source {src} is not a directory; save the files there first")
    fs, path = filesystem(uri)
    in_place = not is_remote(uri) and os.path.realpath(path) == os.path.realpath(src)
    files = sorted(p for p in src.rglob("*") if p.is_file() and not (p.parent == src and (
        p.name == MANIFEST or p.name.startswith(f".{MANIFEST}.tmp-"))))
    # the old manifest goes before any file changes, so readers never see it over new files
    _retry(lambda: fs.rm_file(f"{path}/{MANIFEST}") if fs.exists(f"{path}/{MANIFEST}") else None, "uncommit", uri)
    entries: dict[str, dict[str, Any]] = {}
    for p in files:
        rel = p.relative_to(src).as_posix()
        entries[rel] = {"size": p.stat().st_size, "sha256": _sha256(p)}
        if not in_place:
            _retry(lambda: fs.put_file(str(p), f"{path}/{rel}"), "upload", _join(uri, rel))
    fs.invalidate_cache()
    manifest = {"format": 1, "files": entries, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "metadata": metadata}
    write_text_atomic(_join(uri, MANIFEST), json.dumps(manifest, indent=1, sort_keys=True))
    return manifest


def _check_files(root: Path, manifest: dict, hashes: bool) -> str | None:
    """What is wrong with the copy at root (size, then optionally sha256), or None when it matches."""
    for rel, info in manifest["files"].items():
        p = root / rel
        if not p.is_file():
            return f"{rel} is missing"
        if p.stat().st_size != info["size"]:
            return f"{rel} has {p.stat().st_size} bytes, the manifest says {info['size']}"
        if hashes and _sha256(p) != info["sha256"]:
            return f"{rel} does not match its sha256 in the manifest"
    return None


def _fetch(uri: str, manifest: dict, dest: Path, verify: bool) -> None:
    fs, path = filesystem(uri)
    (dest / MANIFEST).unlink(missing_ok=True)  # the local copy is "committed" only after it checks out
    for rel in manifest["files"]:
        if rel.startswith("/") or ".." in rel.split("/"):
            raise StorageError(f"download {uri}: manifest entry {rel!r} leaves the directory; re-commit it")
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        _retry(lambda: fs.get_file(f"{path}/{rel}", str(dest / rel)), "download", _join(uri, rel))
    problem = _check_files(dest, manifest, verify)
    if problem:
        raise StorageError(f"download {uri}: {problem}; the upload is corrupt or was overwritten, re-commit it")
    write_text_atomic(dest / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))


def download_dir(uri: str | Path, local_dir: str | Path | None = None, verify: bool = True) -> Path:
    """A verified local copy of the committed directory at uri (exactly the files its manifest lists).

    local_dir=None: a local uri is returned as is; a remote one goes to a cache reused while its
    manifest is unchanged ($ALIGNFLOW_CACHE or ~/.cache/alignflow, one folder per URI)."""
    manifest = read_manifest(uri)
    if manifest is None:
        raise StorageError(f"{uri} has no {MANIFEST}: it was never committed (or is still being written); "
                           f"point at a committed directory or commit it first")
    fs, path = filesystem(uri)
    if not is_remote(uri) and (local_dir is None or os.path.realpath(local_dir) == os.path.realpath(path)):
        problem = _check_files(Path(path), manifest, verify)
        if problem:
            raise StorageError(f"{uri}: {problem}; the directory changed after it was committed, re-commit it")
        return Path(path)
    if local_dir is not None:
        dest = Path(local_dir)
        _fetch(str(uri), manifest, dest, verify)
        return dest
    root = Path(os.environ.get("ALIGNFLOW_CACHE") or Path.home() / ".cache" / "alignflow")
    dest = root / hashlib.sha256(fs.unstrip_protocol(path).encode()).hexdigest()[:16]
    root.mkdir(parents=True, exist_ok=True)
    # every rank on a node may ask at once: one downloads, the others wait and then reuse its copy
    with open(root / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _cached_copy_ok(dest, manifest):
            return dest
        tmp = root / f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:  # fetch beside the entry and swap it in: a reader never sees a half-written copy
            _fetch(str(uri), manifest, tmp, verify)
            shutil.rmtree(dest, ignore_errors=True)
            os.replace(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _cached_copy_ok(dest: Path, manifest: dict) -> bool:
    try:
        cached = json.loads((dest / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return cached == manifest and _check_files(dest, manifest, False) is None


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


def get_latest(parent_uri: str | Path) -> str | None:
    """URI of the checkpoint to resume from: the `latest` pointer's target if committed, else the
    newest committed child (the pointer may lag a commit that crashed before updating it); None if none."""
    name = _pointer(parent_uri)
    if name and is_committed(_join(parent_uri, name)):
        return _join(parent_uri, name)
    committed = list_committed(parent_uri)
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
