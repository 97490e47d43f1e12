"""Process logging for the library's entry points and Ray workers: rank 0 at INFO, the others at WARNING."""

from __future__ import annotations

import logging
import os
import sys


def setup_logging(force: bool = False) -> None:
    """INFO from rank 0, warnings from the others. `force`: replace handlers a host process
    (a Ray worker) installed before RANK was known."""
    rank = os.environ.get("RANK", "0")
    level = logging.INFO if rank == "0" else logging.WARNING
    logging.basicConfig(
        level=level,
        format=f"%(asctime)s [rank{rank}] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=force,
    )
    for noisy in ("DeepSpeed", "deepspeed", "httpx", "urllib3", "fsspec", "s3fs", "botocore", "aiobotocore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
