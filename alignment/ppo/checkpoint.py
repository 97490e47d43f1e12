"""Resumable PPO state, committed like every checkpoint (MANIFEST last, then `latest`):

    <ckpt_path>/global_step<iteration>/actor/     DeepSpeed: weights, optimizer, lr scheduler
                                      /critic/    the same (gae only)
                                      /ppo_state.json   iteration, KL coefficient, metrics so far

No RNG state is stored, on purpose: every random choice of an iteration is seeded from
(--seed, iteration) — the prompt order of the episode, the sampling seed, the mini-batch
shuffle — so the iteration number restores them exactly, on any number of ranks.

The engines save into a local staging directory (`trainers.checkpoint.staging_dir`: the path
itself for a local --ckpt_path); the main process commits it. On a multi-node Ray cluster that
staging directory must be on a filesystem every node shares.
"""
from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from alignment import storage
from alignment.trainers.checkpoint import PREFIX, WeightsOnlyCheckpointEngine, staging_dir

log = logging.getLogger(__name__)
STATE_FILE = "ppo_state.json"


@dataclass
class PPOState:
    iteration: int = 0                    # iterations completed
    kl_coef: float = 0.0
    history: list[dict] = field(default_factory=list)


def tag(iteration: int) -> str:
    return f"{PREFIX}{iteration}"


def save_engine(engine: Any, ckpt_uri: str, iteration: int, role: str) -> None:
    """Every rank of the engine's group calls this (DeepSpeed saves collectively)."""
    engine.checkpoint_engine = WeightsOnlyCheckpointEngine()
    engine.save_checkpoint(str(staging_dir(ckpt_uri) / tag(iteration)), tag=role, save_latest=False)


def commit(ckpt_uri: str, state: PPOState, max_keep: int, metadata: dict) -> str:
    """Main process only, after every engine has saved: state file, commit, `latest`, retention."""
    local = staging_dir(ckpt_uri) / tag(state.iteration)
    (local / STATE_FILE).write_text(json.dumps(asdict(state)))
    uri = f"{ckpt_uri.rstrip('/')}/{tag(state.iteration)}"
    storage.commit_dir(local, uri, metadata={"global_step": state.iteration, "stage": "ppo", **metadata})
    storage.set_latest(ckpt_uri, tag(state.iteration))
    storage.apply_retention(ckpt_uri, keep=max_keep, prefix=PREFIX)
    if storage.is_remote(ckpt_uri):
        shutil.rmtree(local, ignore_errors=True)
    log.info("PPO checkpoint committed: %s", uri)
    return uri


def fetch_latest(ckpt_uri: str) -> PPOState | None:
    """Main process: the newest committed checkpoint, staged locally; None when there is none."""
    latest = storage.get_latest(ckpt_uri)
    if latest is None:
        return None
    name = latest.rstrip("/").rsplit("/", 1)[-1]
    local = staging_dir(ckpt_uri) / name
    if storage.is_remote(ckpt_uri):
        storage.download_dir(latest, local)
    state = read_staged(ckpt_uri, name)
    log.info("resuming PPO from %s (iteration %d done, KL coefficient %.4g)", latest, state.iteration, state.kl_coef)
    return state


def read_staged(ckpt_uri: str, name: str) -> PPOState:
    return PPOState(**json.loads((staging_dir(ckpt_uri) / name / STATE_FILE).read_text()))


def load_engine(engine: Any, ckpt_uri: str, iteration: int, role: str) -> None:
    """Every rank of the group calls this, after `fetch_latest` staged the files."""
    engine.checkpoint_engine = WeightsOnlyCheckpointEngine()
    root = Path(staging_dir(ckpt_uri)) / tag(iteration)
    path, _ = engine.load_checkpoint(str(root), tag=role, load_optimizer_states=True, load_lr_scheduler_states=True)
    if path is None:
        raise RuntimeError(f"DeepSpeed could not load the {role} of the committed PPO checkpoint {root}")
