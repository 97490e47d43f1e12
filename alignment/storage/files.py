"""Plain store operations, each under the retry policy: read and write a text file atomically, fetch,
list, delete, exist, and one cheap reachability check."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Callable, TypeVar

from alignment.storage.paths import MANIFEST, filesystem, is_remote
from alignment.storage.retry import StorageError, missing_bucket, retry

T = TypeVar("T")


def read_text(uri: str | Path) -> str | None:
    """The file's text, or None when it does not exist (a missing bucket is still an error)."""
    fs, path = filesystem(uri)

    def read() -> bytes | None:
        try:
            return fs.cat_file(path)
        except FileNotFoundError as e:
            if missing_bucket(e):
                raise
            return None

    data = retry(read, "read", uri)
    try:
        return None if data is None else data.decode("utf-8")
    except UnicodeDecodeError as e:  # damaged, or not written by us: a one-line error, not a traceback
        fix = "delete it and re-commit the directory" if str(uri).endswith(MANIFEST) else "save it as UTF-8"
        raise StorageError(f"{uri}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); {fix}") from None


def read_bytes(uri: str | Path) -> bytes:
    """The file's bytes (FileNotFoundError when it does not exist)."""
    fs, path = filesystem(uri)
    return retry(lambda: fs.cat_file(path), "read", uri)


def write_text_atomic(uri: str | Path, text: str) -> None:
    """Readers see the old text or the new one, never a torn file: tmp + os.replace locally, one PUT on S3."""
    fs, path = filesystem(uri)
    data = text.encode("utf-8")
    if is_remote(uri):
        retry(lambda: fs.pipe_file(path, data), "write", uri)
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

    retry(write, "write", uri)


def retry_call(fn: Callable[[], T], what: str, uri: str | Path) -> T:
    """A store call of the caller's own, under the same retry policy and error types as every other."""
    return retry(fn, what, uri)


def fetch_file(uri: str | Path, dest: str | Path) -> None:
    """Copy one file from the store to a local path (transient errors retried)."""
    fs, path = filesystem(uri)
    retry(lambda: fs.get_file(path, str(dest)), "download", uri)


def list_files(uri: str | Path) -> list[str]:
    """Paths, relative to `uri`, of every file under it (empty when there is nothing there)."""
    fs, path = filesystem(uri)
    return [key[len(path) :].lstrip("/") for key in retry(lambda: fs.find(path), "list", uri)]


def remove(uri: str | Path) -> None:
    """Delete a file or a directory tree; missing is fine. The manifest goes first, so a crash
    mid-delete leaves an uncommitted (ignored) directory rather than a committed, broken one."""
    fs, path = filesystem(uri)

    def rm() -> None:
        for target, recursive in ((f"{path}/{MANIFEST}", False), (path, True)):
            try:
                fs.rm(target, recursive=recursive)
            except (FileNotFoundError, NotADirectoryError) as e:  # uri may be a file (or absent)
                if missing_bucket(e):
                    raise

    retry(rm, "delete", uri)
    fs.invalidate_cache()


def exists(uri: str | Path) -> bool:
    """True when a file or directory is at `uri` (transient store errors retried)."""
    fs, path = filesystem(uri)
    return retry(lambda: fs.exists(path), "check", uri)


def natural_key(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def children(parent_uri: str | Path, prefix: str) -> list[str]:
    """Names of the subdirectories of parent starting with prefix, natural order."""
    fs, path = filesystem(parent_uri)

    def ls() -> list[dict]:
        try:
            return fs.ls(path, detail=True)
        except FileNotFoundError as e:
            if missing_bucket(e):
                raise
            return []

    names = {
        e["name"].rstrip("/").rsplit("/", 1)[-1] for e in retry(ls, "list", parent_uri) if e.get("type") == "directory"
    }
    return sorted((n for n in names if n.startswith(prefix)), key=natural_key)


def check_reachable(uri: str | Path) -> None:
    """One cheap request to the store (retried like any other) so a wrong endpoint, bucket or
    credential fails early with the URI in the message. Local paths are always reachable."""
    if not is_remote(uri):
        return
    fs, path = filesystem(uri)
    bucket = path.split("/", 1)[0]
    # `ls` raises on a refused connection or a bad key (`exists` would just say False)
    retry(lambda: fs.ls(bucket, refresh=True), "reach", uri)
