"""Resumable checkpoints: DeepSpeed engine state + our loop state, committed atomically.

Layout under --ckpt_path: `global_step<N>/` (DeepSpeed files + MANIFEST.json, written last)
and a `latest` pointer updated only after the commit. A crash mid-save leaves a directory
without a manifest, which readers ignore and retention deletes.

DeepSpeed's own loader uses `torch.load(weights_only=False)`; we swap in a checkpoint engine
that loads with `weights_only=True` and an explicit allowlist of the few DeepSpeed types
its files contain, so a checkpoint can't execute code when it's read.
"""
from __future__ import annotations

import hashlib
import logging
import os
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

from alignment import storage

log = logging.getLogger(__name__)
PREFIX = "global_step"


def _safe_globals() -> list:
    """Non-tensor types that appear in DeepSpeed checkpoint files (and nothing else)."""
    allowed: list = []
    try:
        from deepspeed.runtime.fp16.loss_scaler import LossScaler, DynamicLossScaler
        allowed += [LossScaler, DynamicLossScaler]
    except ImportError:
        pass
    try:
        from deepspeed.runtime.zero.config import ZeroStageEnum
        allowed.append(ZeroStageEnum)
    except ImportError:
        pass
    try:
        from deepspeed.utils.tensor_fragment import fragment_address
        allowed.append(fragment_address)
    except ImportError:
        pass
    return allowed


class WeightsOnlyCheckpointEngine(TorchCheckpointEngine):
    def load(self, path: str, map_location=None):
        with torch.serialization.safe_globals(_safe_globals()):
            return torch.load(path, map_location=map_location, weights_only=True)


@dataclass
class LoopState:
    """Where the training loop is; saved with every checkpoint."""

    global_step: int = 0
    epoch: int = 0
    micro_batches_done: int = 0          # in the current epoch, on each rank
    history: list[dict] = field(default_factory=list)  # logged metrics so far


def _rng_state() -> dict:
    np_state = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def _set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])


def staging_dir(ckpt_uri: str) -> Path:
    """Local directory DeepSpeed writes into: the path itself when local, a cache for remote URIs."""
    if not storage.is_remote(ckpt_uri):
        return Path(ckpt_uri.removeprefix("file://"))
    digest = hashlib.sha256(ckpt_uri.encode()).hexdigest()[:16]
    return Path(os.environ.get("ALIGNFLOW_CACHE", tempfile.gettempdir())) / f"alignflow-ckpt-{digest}"


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def save(engine: Any, ckpt_uri: str, state: LoopState, max_keep: int, metadata: dict | None = None) -> str:
    """Save on every rank, commit on rank 0. Returns the committed URI."""
    tag = f"{PREFIX}{state.global_step}"
    local_root = staging_dir(ckpt_uri)
    engine.checkpoint_engine = WeightsOnlyCheckpointEngine()
    client = {"loop": asdict(state), "rng": _rng_state()}
    engine.save_checkpoint(str(local_root), tag=tag, client_state=client, save_latest=False)
    _barrier()
    uri = f"{ckpt_uri.rstrip('/')}/{tag}"
    if _rank() == 0:
        world = dist.get_world_size() if dist.is_initialized() else 1
        storage.commit_dir(local_root / tag, uri, metadata={"global_step": state.global_step, "world_size": world,
                                                            **(metadata or {})})
        storage.set_latest(ckpt_uri, tag)
        storage.apply_retention(ckpt_uri, keep=max_keep, prefix=PREFIX)
        if storage.is_remote(ckpt_uri):
            shutil.rmtree(local_root / tag, ignore_errors=True)
        log.info("checkpoint committed: %s", uri)
    _barrier()
    return uri


def check_world_size(ckpt_uri: str, world_size: int) -> None:
    """Before any weights load: the newest checkpoint must come from as many ranks as this run has.
    Its ZeRO optimizer state is sharded per rank, and the data order depends on the rank count too."""
    from alignment.config.base import ConfigError
    latest = storage.get_latest(ckpt_uri)
    written = ((storage.read_manifest(latest) or {}).get("metadata", {}).get("world_size") if latest else None)
    if written is not None and written != world_size:
        raise ConfigError(f"checkpoint {latest} was written by {written} ranks but this run has {world_size}: resume "
                          f"with {written} ranks (--num_nodes x --num_gpus_per_node, or the launcher's size), or "
                          f"start over with a new --ckpt_path")


def load_latest(engine: Any, ckpt_uri: str) -> LoopState | None:
    """Restore engine + RNG from the newest committed checkpoint; None when there is none."""
    latest = storage.get_latest(ckpt_uri)
    if latest is None:
        return None
    tag = latest.rstrip("/").rsplit("/", 1)[-1]
    local_root = staging_dir(ckpt_uri)
    if storage.is_remote(ckpt_uri):
        if _rank() == 0 or int(os.environ.get("LOCAL_RANK", 0)) == 0:
            storage.download_dir(latest, local_root / tag)
        _barrier()
    engine.checkpoint_engine = WeightsOnlyCheckpointEngine()
    path, client = engine.load_checkpoint(str(local_root), tag=tag, load_optimizer_states=True,
                                          load_lr_scheduler_states=True)
    if path is None:
        raise RuntimeError(f"DeepSpeed could not load the committed checkpoint {latest}")
    _set_rng_state(client["rng"])
    state = LoopState(**client["loop"])
    log.info("resumed from %s (step %d, epoch %d, micro-batch %d)", latest, state.global_step, state.epoch,
             state.micro_batches_done)
    return state
