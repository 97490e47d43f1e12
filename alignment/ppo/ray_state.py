"""A Ray PPO run's state in the store: each trained group's checkpoint (every rank saves its shard, each
node's first rank uploads its node's files, the driver commits one state over all of them), resuming from
the newest committed one, and the final model committed by the actor group with the driver's metrics."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import ray

from alignment import lease, storage
from alignment.config.base import public_dict
from alignment.config.ppo import PPOConfig
from alignment.ppo.groups import ModelGroup
from alignment.ppo.loop import PPOState, resume_state
from alignment.ppo.workers import ModelWorker
from alignment.training import checkpoint, resume_point, run_identity
from alignment.training.run_identity import RunIdentity


def save(trained: list[ModelGroup], cfg: PPOConfig, state: PPOState, actor_world: int) -> None:
    why = lease.lost(cfg.ckpt.path)  # taken over while stopped: no file of this checkpoint is written
    if why:
        raise lease.LeaseLost(why)
    version = storage.new_version()
    ray.get([f for g in trained for f in g.call(ModelWorker.save_checkpoint, cfg.ckpt.path, state.iteration).futures])
    # then each node's first rank of each group uploads its node's files (s3://): the driver's node may hold none
    uploads = [g.call(ModelWorker.upload_checkpoint, cfg.ckpt.path, state.iteration, version) for g in trained]
    parts = [p for u in uploads for p in u.get()]
    checkpoint.commit(
        cfg.ckpt.path,
        state.iteration,
        {"ppo": asdict(state)},
        cfg.ckpt.max_num,
        {"stage": "ppo", "config": public_dict(cfg), run_identity.KEY: RunIdentity.of(cfg).record()},
        actor_world,
        {k: v for p in parts for k, v in p.items()},
        version,
        cfg.ckpt.max_mem,
    )


def resume(trained: list[ModelGroup], cfg: PPOConfig) -> PPOState | None:
    """--load_checkpoint: the newest committed state, loaded into the groups (the weights load on the
    workers' nodes); None to start fresh. Another run's checkpoint: ConfigError before its weights load."""
    ckpt = cfg.ckpt

    def find() -> resume_point.Latest | None:
        found = resume_point.find_latest(ckpt.path)
        if found is not None:
            RunIdentity.of(cfg).check(resume_point.recorded_identity(found.uri), found.uri)
        return found

    got = resume_state(ckpt, find)
    if got is None:
        return None
    state, found = got
    ray.get([f for g in trained for f in g.call(ModelWorker.load_checkpoint, ckpt.path, found.name).futures])
    return state


def commit(actor: ModelGroup, cfg: PPOConfig, metrics_dir: Path, final: dict[str, float], tracking: dict) -> None:
    """The model, with what the driver wrote beside it (metrics.jsonl, TensorBoard events placed inside
    --save_path), committed by the actor group."""
    files = {str(p.relative_to(metrics_dir)): p.read_bytes() for p in sorted(metrics_dir.rglob("*")) if p.is_file()}
    metadata = {"stage": "ppo", "config": public_dict(cfg), "final_metrics": final, "tracking": tracking}
    actor.call(ModelWorker.commit, cfg.ckpt.output_dir, metadata, files).get()
