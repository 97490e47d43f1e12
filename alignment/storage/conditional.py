"""Conditional writes of one small control file (an output's lease): create it only if absent, replace
or delete it only if nobody changed it since it was read. What makes a lease a fence.

On S3 the server checks the condition: If-None-Match: * to create, If-Match: <ETag> to replace or
delete (a 412 PreconditionFailed when it does not hold). A local filesystem has no such request, so
every writer of a lease takes an exclusive lock (`locked`) around its read-compare-write and the tag
is the content's hash; the lock is flock on the lease's directory, or a POSIX lock on a sibling lock
file where a filesystem refuses flock on a directory (NFS). On S3 `locked` is a no-op: the condition
travels with the request.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from alignment.storage.files import read_text, write_text_atomic
from alignment.storage.paths import filesystem, is_remote
from alignment.storage.retry import StorageError, missing_bucket, retry

_PRECONDITION = (
    "PreconditionFailed",
    "pre-conditions you specified did not hold",
    "At least one of the pre-conditions",
)


@contextmanager
def locked(uri: str | Path) -> Iterator[None]:
    """Exclusive against every other `locked` on the same directory, in any process of this host or (on a
    filesystem with working locks) another. Not re-entrant: a thread must not nest it."""
    if is_remote(uri):
        yield
        return
    folder = os.path.dirname(filesystem(uri)[1])
    os.makedirs(folder, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:  # NFS emulates flock with POSIX locks, which need a file open for writing
            if e.errno not in (errno.EBADF, errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP):
                raise
            os.close(fd)
            fd = os.open(f"{filesystem(uri)[1]}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.lockf(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases either lock


def read_tagged(uri: str | Path) -> tuple[str | None, str]:
    """(text or None when absent, tag). Remote: the ETag is read before the text, so a text that changed in
    between makes a later conditional write with that tag fail instead of overwrite."""
    if not is_remote(uri):
        text = read_text(uri)
        return text, _hash(text)
    fs, path = filesystem(uri)

    def etag() -> str:
        try:
            return str(fs.info(path, refresh=True).get("ETag", ""))
        except FileNotFoundError as e:
            if missing_bucket(e):
                raise
            return ""

    tag = retry(etag, "read", uri)
    text = read_text(uri)
    return text, (tag if text is not None else "")


def create(uri: str | Path, text: str) -> bool:
    """Write `text` only if the file does not exist; False when it does."""
    fs, path = filesystem(uri)
    data = text.encode()
    if not is_remote(uri):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return True
    # the server's 412: s3fs raises FileExistsError (AWS) or OSError EINVAL (SeaweedFS)
    return _conditional(uri, text, lambda: fs.pipe_file(path, data, mode="create"), FileExistsError)


def replace(uri: str | Path, text: str, tag: str) -> bool:
    """Write `text` only if the file is still what `read_tagged` saw as `tag`; False when it changed.
    Locally the caller holds `locked(uri)`."""
    fs, path = filesystem(uri)
    if not is_remote(uri):
        if _hash(read_text(uri)) != tag:
            return False
        write_text_atomic(uri, text)
        return True
    return _conditional(uri, text, lambda: fs.pipe_file(path, text.encode(), IfMatch=tag))


def delete(uri: str | Path, tag: str) -> bool:
    """Delete the file only if it is still what `read_tagged` saw as `tag`. Locally the caller holds `locked(uri)`."""
    fs, path = filesystem(uri)
    if not is_remote(uri):
        if _hash(read_text(uri)) != tag:
            return False
        retry(lambda: os.unlink(path), "delete", uri)
        return True
    bucket, key, _ = fs.split_path(path)
    return _conditional(uri, None, lambda: fs.call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=tag))


def _conditional(uri: str | Path, text: str | None, call: Callable[[], object], *refused: type) -> bool:
    """Run a conditional request; False on the server's 412. A retried request whose first try did land
    answers 412 to its own write: reading the file back tells (text None: a delete)."""
    try:
        retry(call, "write", uri)
    except StorageError as e:
        cause = e.__cause__
        if not isinstance(cause, refused) and not any(p in str(cause) for p in _PRECONDITION):
            raise
        return read_text(uri) == text
    filesystem(uri)[0].invalidate_cache()
    return True


def _hash(text: str | None) -> str:
    return "" if text is None else hashlib.sha256(text.encode()).hexdigest()
