"""Where things are in the store: the fsspec filesystem of a URI, joining names, the fixed file names.

The bottom of the store package: it imports nothing of alignment (retry.py and the rest build on it).
S3 endpoint and credentials come from the standard AWS environment (AWS_ENDPOINT_URL_S3,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...) so the same code runs against a real S3 unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import fsspec
from fsspec.core import split_protocol

MANIFEST = "MANIFEST.json"
LATEST = "latest"
BEST = "best"  # the checkpoint with the best evaluation so far (--best_metric_key): kept by retention
_LOCAL = (None, "file", "local")


def is_remote(uri: str | Path) -> bool:
    """True for object-store URIs (s3://, gs://, ...): callers then need a local staging copy."""
    return split_protocol(str(uri))[0] not in _LOCAL


READ_TIMEOUT_S = 60.0  # ALIGNFLOW_STORE_READ_TIMEOUT overrides (seconds)


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
            config["retries"] = {"mode": "standard", "total_max_attempts": 3}  # retry.retry is the outer policy
        # no listings cache: other processes (trainer, flow, retention) change the same prefixes
        kwargs = {"use_listings_cache": False, "config_kwargs": config}
        if os.environ.get("AWS_ENDPOINT_URL_S3"):
            kwargs["client_kwargs"] = {"endpoint_url": os.environ["AWS_ENDPOINT_URL_S3"]}
    fs = fsspec.filesystem(protocol, **kwargs)
    if protocol == "s3":
        # s3fs retries a timed-out or cut-off request 5 times itself, each time with botocore's 3
        # attempts: 15 read timeouts per try of retry.retry, 75 per call. Two layers are enough:
        # botocore per request, retry.retry per operation (a frozen store gives up in tries x 3 x read timeout).
        fs.retries = 1
    return fs, fs._strip_protocol(str(uri)).rstrip("/")


def join(uri: str | Path, name: str) -> str:
    return f"{str(uri).rstrip('/')}/{name}"
