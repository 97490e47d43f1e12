"""Store errors and the retry policy every store call goes through.

Transient errors (connection refused/reset, timeouts, 5xx, throttling) are retried with exponential
backoff; when they outlast the retries they become StoreUnavailable, a TransientError (the CLIs exit
75 and the stage task retries later). Anything else the store says (missing path, missing bucket,
denied) is a StorageError with one line naming the URI and the fix.
"""

from __future__ import annotations

import errno
import os
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, TypeVar

from alignment.errors import TransientError, UserError
from alignment.redact import scrub
from alignment.storage.paths import is_remote

try:  # botocore comes with s3fs; local-only use works without it
    from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
    from botocore.exceptions import ConnectionError as _BotoConnError
except ImportError:  # pragma: no cover
    BotoCoreError = ClientError = _BotoConnError = HTTPClientError = ()  # type: ignore[assignment,misc]

DEFAULT_TRIES = 5  # ALIGNFLOW_STORE_RETRIES overrides; waits 0.2, 0.4, 0.8, 1.6 s between tries
BACKOFF_S = 0.2
_TRANSIENT_CODES = {
    "SlowDown",
    "ServiceUnavailable",
    "InternalError",
    "RequestTimeout",
    "Throttling",
    "ThrottlingException",
    "503",
    "500",
    "502",
    "504",
}
_TRANSIENT_ERRNOS = {
    errno.ECONNREFUSED,
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.ETIMEDOUT,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.EPIPE,
    errno.EBUSY,
    getattr(errno, "EREMOTEIO", -1),
}
T = TypeVar("T")


class StorageError(UserError, RuntimeError):
    """A store operation failed for good; the one-line message names the URI and what to do about it."""


class StoreUnavailable(StorageError, TransientError):
    """The store stayed unreachable or overloaded through every retry: worth running again later."""


def one_line(text: str) -> str:
    """Collapse to one line and scrub anything secret-looking that a library put in an error."""
    return scrub(" ".join(str(text).split()))


def _chain(e: BaseException | None):
    for depth in range(8):  # an exception and what it was raised from (bounded: chains can loop)
        # one of our own errors further down is an earlier failure this one met while it was being
        # handled (a cleanup after a missing bucket), not its cause: its words must not classify this one
        if e is None or (depth and type(e).__module__.startswith("alignment.")):
            return
        yield e
        e = e.__cause__ or e.__context__


def missing_bucket(e: BaseException) -> bool:
    return any(
        "NoSuchBucket" in repr(getattr(x, "response", "")) or "bucket does not exist" in str(x).lower()
        for x in _chain(e)
    )


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


def _no_credentials(e: BaseException) -> bool:
    """botocore found no key anywhere (NoCredentialsError; s3fs may re-raise it under another type)."""
    return any(
        type(x).__name__ in ("NoCredentialsError", "PartialCredentialsError")
        or "unable to locate credentials" in str(x).lower()
        for x in _chain(e)
    )


def _fix(e: BaseException) -> str:
    if _no_credentials(e):
        return (
            "no S3 credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE "
            "naming a profile in ~/.aws/credentials) in this process's environment"
        )
    if missing_bucket(e):
        return "the bucket does not exist; create it or fix the URI"
    if isinstance(e, FileNotFoundError):
        return "the path does not exist; check the URI"
    if isinstance(e, PermissionError):
        return "access denied; check the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and policy"
    return "check the URI and the store"


def retry(fn: Callable[[], T], what: str, uri: str | Path) -> T:
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
                where = (
                    f" (AWS_ENDPOINT_URL_S3={os.environ.get('AWS_ENDPOINT_URL_S3', 'unset')})" if is_remote(uri) else ""
                )
                fix = f"failed {tries} times; check that the store is reachable{where} and retry"
            error = StoreUnavailable if transient else StorageError
            raise error(one_line(f"{what} {uri}: {type(e).__name__}: {e}; {fix}")) from e
    raise AssertionError("unreachable")  # pragma: no cover


def run_all(jobs: list[Callable[[], T]]) -> list[T]:
    """Run store jobs (uploads, downloads, hashes) on ALIGNFLOW_STORE_THREADS threads (default 8) and
    return their results in order; the first job to fail stops the queue and its error is raised.

    Threads, not processes: fsspec's S3 calls wait on their own event loop and hashlib releases the GIL
    on large reads, so transfers and hashing overlap. s3fs already splits one large file into
    concurrent parts; this adds the concurrency across files and hides hashing behind the transfers."""

    threads = max(1, int(os.environ.get("ALIGNFLOW_STORE_THREADS", 8)))
    if threads == 1 or len(jobs) < 2:
        return [job() for job in jobs]
    with ThreadPoolExecutor(min(threads, len(jobs)), thread_name_prefix="alignflow-store") as pool:
        futures = [pool.submit(job) for job in jobs]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for f in pending:
            f.cancel()
        failed = next((f for f in futures if f in done and f.exception() is not None), None)
        if failed is not None:
            raise failed.exception()
        return [f.result() for f in futures]
