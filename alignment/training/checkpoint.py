"""Resumable checkpoints, one design for every stage (SFT, RM, DPO, KTO and the PPO family):

    <ckpt_path>/global_step<N>/<role>/      DeepSpeed: weights, optimizer, lr scheduler — one folder per
                                            trained engine (`model`; PPO: `actor` and `critic`)
                              /state.json   where the loop is (the stage's own fields), the RNG state
                              /MANIFEST.json  written last: the commit
    <ckpt_path>/latest                      the newest committed tag, moved only after the commit
    <ckpt_path>/best                        the tag with the best evaluation so far (--best_metric_key)

A crash mid-save leaves a directory without a manifest, which readers ignore and retention deletes.
Every rank of an engine's group saves its part (`save_engine`, collective), then one process commits
(`commit`). The engines write into a local staging directory (`staging_dir`): the path itself for a
local --ckpt_path, which on several nodes must be a shared filesystem; for s3:// a folder per node,
whose files the node's first rank uploads into the checkpoint's version folder (`upload_role`) before
the commit lists every node's files in one manifest. Loading reads the committed files: the path itself,
or for s3:// the node's verified copy (one rank per node downloads it, the others wait and reuse it).

Which checkpoint a resume uses, and whether it is this run's: alignment/training/resume_point.py.
DeepSpeed's files are read by `weights_only.WeightsOnlyCheckpointEngine`, so a checkpoint can't
execute code when it's read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch.distributed as dist

from alignment import lease, storage
from alignment.distributed.collectives import barrier
from alignment.training import finite, run_identity
from alignment.training.resume_point import PREFIX, STATE_FILE, Latest, find_latest, recorded_identity, verify
from alignment.training.rng_state import restore_rng, rng_state
from alignment.training.run_identity import RunIdentity
from alignment.training.weights_only import WeightsOnlyCheckpointEngine

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

log = logging.getLogger(__name__)


def _env_int(name: str) -> int:
    return int(os.environ.get(name, "0") or 0)


def staging_dir(ckpt_uri: str) -> Path:
    """Local directory DeepSpeed writes into: the path itself when local, a folder of this node's for
    remote URIs. A node is named by its first global rank (RANK - LOCAL_RANK: torchrun, the deepspeed
    launcher and ray_ranks number a node's ranks contiguously), so two nodes never share a folder,
    even where their caches share a disk."""
    if not storage.is_remote(ckpt_uri):
        return Path(ckpt_uri.removeprefix("file://"))
    digest = hashlib.sha256(ckpt_uri.encode()).hexdigest()[:16]
    node = _env_int("RANK") - _env_int("LOCAL_RANK")
    return Path(os.environ.get("ALIGNFLOW_CACHE", tempfile.gettempdir())) / f"alignflow-ckpt-{digest}" / f"node{node}"


def tag(step: int) -> str:
    return f"{PREFIX}{step}"


RoleWriter = Callable[[Path | None], None]  # extra files into a role's folder (None: not on this rank); collective


def save_engine(
    engine: DeepSpeedEngine, ckpt_uri: str, step: int, role: str = "model", extra: RoleWriter | None = None
) -> None:
    """Every rank of the engine's group calls this (DeepSpeed saves collectively). `extra` then writes files
    of our own into the role's folder on rank 0 (--save_hf_ckpt's `hf/`, --enable_ema's average), committed
    and hashed with the checkpoint."""
    engine.checkpoint_engine = WeightsOnlyCheckpointEngine()
    engine.save_checkpoint(str(staging_dir(ckpt_uri) / tag(step)), tag=role, save_latest=False)
    if extra is not None:
        rank0 = not dist.is_initialized() or dist.get_rank() == 0
        extra(staging_dir(ckpt_uri) / tag(step) / role if rank0 else None)


def role_dir(ckpt_uri: str, name: str, role: str) -> Path:
    """A role's folder in this node's verified copy of the committed checkpoint `name` (its extra files)."""
    return verify(f"{ckpt_uri.rstrip('/')}/{name}").folder / role


def upload_role(ckpt_uri: str, step: int, role: str, version: str) -> dict:
    """Every rank of the engine's group, after all of them saved: for a remote --ckpt_path the first
    rank of each node uploads its node's files of `role` into the checkpoint's version folder and
    returns their manifest entries; {} on the other ranks and for a local path."""
    if not storage.is_remote(ckpt_uri) or _env_int("LOCAL_RANK") > 0:
        return {}
    local = staging_dir(ckpt_uri) / tag(step) / role
    entries = storage.upload_files(local, f"{ckpt_uri.rstrip('/')}/{tag(step)}", version, prefix=role)
    shutil.rmtree(local, ignore_errors=True)
    return entries


def commit(
    ckpt_uri: str,
    step: int,
    state: dict,
    max_keep: int,
    metadata: dict,
    world_size: int,
    parts: dict | None = None,
    version: str = "",
    max_gb: float | None = None,
) -> str:
    """One process, after every engine has saved (remote: after every node uploaded its `parts` into
    `version`, see upload_role): state.json (with this process's RNG), the commit, `latest`, retention."""
    uri = f"{ckpt_uri.rstrip('/')}/{tag(step)}"
    # every caller went through save(), which checked the weights before any engine saved them
    meta = {"global_step": step, "world_size": world_size, finite.FINITE: True, **metadata}
    text = json.dumps({**state, "rng": rng_state()})
    # only while this run holds the lease on its --ckpt_path: alignment/lease.py
    if storage.is_remote(ckpt_uri):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / STATE_FILE).write_text(text)
            entries = {**(parts or {}), **storage.upload_files(tmp, uri, version)}
        storage.commit_parts(uri, version, entries, meta, fence=lambda: lease.fenced(ckpt_uri))
    else:
        local = staging_dir(ckpt_uri) / tag(step)
        (local / STATE_FILE).write_text(text)
        storage.commit_dir(local, uri, metadata=meta, fence=lambda: lease.fenced(ckpt_uri))
    with lease.fenced(ckpt_uri):
        storage.set_latest(ckpt_uri, tag(step))
        storage.apply_retention(ckpt_uri, keep=max_keep, prefix=PREFIX, max_bytes=max_gb and max_gb * 1024**3)
    log.info("checkpoint committed: %s", uri)
    return uri


def load_engine(engine: DeepSpeedEngine, ckpt_uri: str, name: str, role: str = "model") -> None:
    """Every rank of the engine's group calls this, with a checkpoint find_latest chose: its files are
    verified (once per process) before DeepSpeed reads them; a remote one is read from this node's
    verified copy (storage.download_dir: one rank of the node downloads, the others wait for it)."""
    uri = f"{ckpt_uri.rstrip('/')}/{name}"
    folder = verify(uri).folder
    engine.checkpoint_engine = WeightsOnlyCheckpointEngine()
    path, _ = engine.load_checkpoint(str(folder), tag=role, load_optimizer_states=True, load_lr_scheduler_states=True)
    if path is None:
        raise RuntimeError(f"DeepSpeed could not load the {role} of the committed checkpoint {uri}")


def _check_lease(ckpt_uri: str) -> None:
    """Every rank, before any writes: LeaseLost on all of them when rank 0 finds that this run's lease on
    the checkpoint folder was taken over (a stopped run resumed), so that no file of a folder another run
    now writes is touched (the commit is fenced again)."""
    why = [lease.lost(ckpt_uri) if not dist.is_initialized() or dist.get_rank() == 0 else ""]
    if dist.is_initialized():
        dist.broadcast_object_list(why, src=0)
    if why[0]:
        raise lease.LeaseLost(why[0])


def save(
    engines: dict[str, DeepSpeedEngine],
    ckpt_uri: str,
    step: int,
    state: dict,
    max_keep: int,
    metadata: dict,
    extra: dict[str, RoleWriter] | None = None,
    identity: RunIdentity | None = None,
    max_gb: float | None = None,
) -> str:
    """Every rank of a process group that holds all `engines` (role -> engine): save (with the `extra` files of
    a role), each node's first rank uploads (remote), rank 0 commits. Weights holding a NaN/Inf:
    NonFiniteError on every rank before anything is written (finite.py). A run whose lease was taken over
    (alignment/lease.py) stops on every rank before a file is written."""
    finite.check_engines(engines, f"checkpoint {ckpt_uri.rstrip('/')}/{tag(step)}", step)
    _check_lease(ckpt_uri)
    if identity is not None:
        metadata = {**metadata, run_identity.KEY: identity.record(engines)}
    for role, engine in engines.items():
        save_engine(engine, ckpt_uri, step, role, (extra or {}).get(role))
    barrier()
    rank0 = not dist.is_initialized() or dist.get_rank() == 0
    version = [storage.new_version() if rank0 else None]
    if dist.is_initialized():
        dist.broadcast_object_list(version, src=0)
    parts = {}
    for role in engines:
        parts.update(upload_role(ckpt_uri, step, role, version[0]))
    gathered = [parts]
    if dist.is_initialized():
        gathered = [None] * dist.get_world_size() if rank0 else None
        dist.gather_object(parts, gathered, dst=0)
    uri = f"{ckpt_uri.rstrip('/')}/{tag(step)}"
    if rank0:
        commit(
            ckpt_uri,
            step,
            state,
            max_keep,
            metadata,
            dist.get_world_size() if dist.is_initialized() else 1,
            {k: v for p in gathered for k, v in p.items()},
            version[0],
            max_gb,
        )
    barrier()
    return uri


def mark_best(ckpt_uri: str, step: int) -> None:
    """Point `best` under the checkpoint folder at step's committed checkpoint (--best_metric_key); retention
    keeps it. Rank 0 only (every rank may call), fenced by the run's lease as every write there."""
    if dist.is_initialized() and dist.get_rank() != 0:
        return
    with lease.fenced(ckpt_uri):
        storage.set_latest(ckpt_uri, tag(step), pointer=storage.BEST)


def load_latest(
    engines: dict[str, DeepSpeedEngine], ckpt_uri: str, identity: RunIdentity | None = None
) -> Latest | None:
    """Every rank of a process group that holds all `engines`: the newest committed checkpoint, its
    engines loaded and its RNG restored; None when there is none. Another run's (`identity`, the model's
    shape included): ConfigError before any of its weights load."""
    found = find_latest(ckpt_uri)
    if found is None:
        return None
    if identity is not None:
        identity.check_shapes(recorded_identity(found.uri), engines, found.uri)
    for role, engine in engines.items():
        load_engine(engine, ckpt_uri, found.name, role)
    restore_rng(found.state)
    return found
