"""Checks a training CLI runs right after its flags parse, before any data or model is read."""
from __future__ import annotations

from alignment.config.stages import StageConfig


def check_outputs(cfg: StageConfig) -> None:
    """The stores the run will write to (--save_path, --ckpt_path, --output_path) answer and their
    buckets exist: one request each, so a wrong bucket fails now, not after the model loaded and
    trained. Their schemes were checked with the flags (alignment.config.groups.check_store_uri)."""
    from alignment.datasets.sources import check_store
    from alignment.storage import StorageError

    for name in ("save_path", "ckpt_path", "output_path"):
        uri = getattr(cfg, name, None)
        if uri:
            check_store(f"--{name}", uri, StorageError)
