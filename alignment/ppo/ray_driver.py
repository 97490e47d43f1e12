"""PPO's Ray backend of `alignment.ppo.controller.ModelGroups` (OpenRLHF's design): this process —
the driver inside the Ray job — places the model groups and is the one controller; each typed call
sends work to a group's ranks (generation on the actor ranks' HF engine or the vLLM engines,
log-probs, values, rewards from the RM group or the driver's reward function, training).

Tensors move between groups through Ray's object store. With the HF engine inside the actor,
weight sync is a no-op by construction (the engine generates with the weights it trains); with
vLLM engines (--vllm_num_engines), the actor's weights go to them after every actor update in
bounded chunks through the object store (`sync_weights`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from alignment.config.base import public_dict
from alignment.config.ppo import PPOConfig
from alignment.distributed import placement
from alignment.models.loading import resolve_model_path
from alignment.ppo.batch import SequenceBatch
from alignment.ppo.controller import check_sizes, iterations_per_episode, sampling_params
from alignment.ppo.experience import Experience
from alignment.ppo.groups import ModelGroup, split
from alignment.ppo.loop import PPOState, resume_state
from alignment.rewards.scorer import Scored
from alignment.rollout.types import Rollout, SamplingParams

log = logging.getLogger("alignment.train_ppo_ray")


@dataclass
class Gathered:
    """Each rank's rows of a group call, concatenated in rank order once they are all in."""

    futures: list

    def get(self) -> torch.Tensor:
        import ray

        return torch.cat(ray.get(self.futures))


@dataclass
class ShardedRollout:
    """The generators' rollouts of consecutive prompt shards, joined once they are all in."""

    futures: list
    starts: list[int]  # each shard's first prompt

    def get(self) -> Rollout:
        import ray

        rollout = Rollout()
        for part, start in zip(ray.get(self.futures), self.starts):
            rollout.extend(part, index_offset=start)
        return rollout


@dataclass
class GroupMetrics:
    """A training pass's metrics, which every rank returns already averaged across its group."""

    futures: list

    def get(self) -> dict[str, float]:
        import ray

        return ray.get(self.futures)[0]


class RayGroups:
    rank, world = 0, 1  # one controller, in the driver: it sees every row of the iteration

    def __init__(self, cfg: PPOConfig, n_prompts: int, function_reward: Any | None):
        import ray

        self.cfg, self.function_reward = cfg, function_reward
        self.plans = placement.plan(cfg)
        self.actor_world = next(p for p in self.plans if p.role == "actor").world_size
        total_iterations = cfg.num_episodes * iterations_per_episode(n_prompts, cfg.rollout_batch_size)
        self.total_steps = total_iterations * check_sizes(cfg, self.actor_world)
        resources = ray.cluster_resources()
        self.gpu = resources.get("GPU", 0) > 0
        kind = "GPU" if self.gpu else "CPU"
        placement.check_resources(self.plans, resources.get(kind, 0), kind)
        self.groups = self._place(ray, kind, resources)
        self.has_critic = "critic" in self.groups

    def _place(self, ray: Any, kind: str, resources: dict) -> dict[str, ModelGroup]:
        from ray.util.placement_group import placement_group

        bundle = {"GPU": 1, "CPU": 1} if self.gpu else {"CPU": 1}
        pgs = {
            name: placement_group([dict(bundle)] * n, strategy="PACK")
            for name, n in placement.bundles_needed(self.plans).items()
        }
        ready, _ = ray.wait([pg.ready() for pg in pgs.values()], num_returns=len(pgs), timeout=300)
        if len(ready) < len(pgs):
            raise RuntimeError(
                f"placement groups not ready after 300 s ({kind} bundles requested: "
                f"{placement.bundles_needed(self.plans)}; cluster: {resources})"
            )
        cores = int(resources.get("CPU", 1) / max(1, len(ray.nodes())))
        threads = placement.threads_per_rank(self.plans, cores, self.cfg.num_threads)
        engine_cores, trainer_cores = placement.split_cores(cores, self.cfg.vllm_num_engines)
        trainer_cores = trainer_cores if self.cfg.vllm_num_engines and not self.gpu else None
        self.engines = [self._start_engine(pgs, k, engine_cores[k]) for k in range(self.cfg.vllm_num_engines)]
        self.collective_sync = bool(self.engines) and (
            self.cfg.vllm_sync_backend == "gloo" or (self.gpu and not self.cfg.colocate_all_models)
        )
        if self.engines and not self.collective_sync:
            log.warning(
                "--vllm_sync_backend nccl needs the engines on GPUs of their own (%s): weights go to the vLLM "
                "engines in chunks through Ray's object store (--vllm_sync_backend gloo broadcasts over gloo)",
                "--colocate_all_models shares them" if self.gpu else "this cluster has no GPUs",
            )
        if self.cfg.vllm_enable_sleep:
            log.info(
                "--vllm_enable_sleep: %s",
                "the engines sleep between rollouts (weights to CPU memory, KV cache freed)"
                if self.gpu
                else "the engines run on CPU, their memory is host memory: nothing to free",
            )
        groups = {p.role: ModelGroup(p, pgs[p.bundle_set], self.gpu) for p in self.plans if p.role != "vllm"}
        ray.get(
            [f for g in groups.values() for f in g.init(self.cfg, threads, self.total_steps, trainer_cores)]
            + [e.ready.remote() for e in self.engines]
        )
        if self.collective_sync:
            self._open_sync_group(groups["actor"].workers[0])
        log.info(
            "placed %s; %d threads per rank",
            ", ".join(
                f"{p.role} {p.nodes}x{p.per_node}" + (f" on {p.bundle_set}'s bundles" if p.bundle_set != p.role else "")
                for p in self.plans
            ),
            threads,
        )
        nodes = {role: ray.get(g.node_ids()) for role, g in groups.items()}
        log.info(
            "ranks by Ray node (%d nodes in the cluster): %s",
            len(ray.nodes()),
            "; ".join(f"{role} {' '.join(n[:12] for n in ids)}" for role, ids in nodes.items()),
        )
        return groups

    def _start_engine(self, pgs: dict, k: int, core: int) -> Any:
        """vLLM engine k (a Ray actor holding an in-process LLM) on bundle k of the engines' set."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from alignment.distributed.ray_ranks import unniced
        from alignment.ppo.workers import vllm_engine_actor

        cfg, plan = self.cfg, next(p for p in self.plans if p.role == "vllm")
        env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
        if not self.gpu:
            env.update(
                VLLM_CPU_OMP_THREADS_BIND=str(core),
                VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            )
        actor = ray.remote(vllm_engine_actor()).options(
            num_cpus=plan.share,
            num_gpus=plan.share if self.gpu else 0,
            runtime_env=unniced(env),
            scheduling_strategy=PlacementGroupSchedulingStrategy(pgs[plan.bundle_set], placement_group_bundle_index=k),
        )
        return actor.remote(
            resolve_model_path(cfg.pretrain, revision=cfg.revision),
            cfg.prompt_max_len + cfg.generate_max_len,
            cfg.seed + k,
            not self.gpu,
            cfg.vllm_gpu_memory_utilization,
            cfg.enable_prefix_caching,
            "bfloat16" if cfg.bf16 else "auto",
            cfg.vllm_enable_sleep,
        )

    def _open_sync_group(self, root: Any) -> None:
        """Actor rank 0 (root) and every engine join one process group for the weight broadcast."""
        import ray

        from alignment.rollout.collective_sync import SyncGroup

        world_size = 1 + len(self.engines)
        host, port = ray.get(root.sync_group_address.remote(world_size))
        group = SyncGroup(host, port, world_size, self.cfg.vllm_sync_backend)
        ray.get(
            [root.join_sync_group.remote(group)]
            + [e.join_sync_group.remote(group, k + 1) for k, e in enumerate(self.engines)]
        )
        log.info(
            "weight sync: %s broadcast from actor rank 0 to %d vLLM engine(s) (%s:%d)",
            group.backend,
            len(self.engines),
            host,
            port,
        )

    def sync_weights(self) -> float:
        """Push the actor's new weights to every vLLM engine (a collective broadcast, or bounded
        chunks through the object store); seconds taken."""
        import ray

        if not self.engines:
            return 0.0
        t0 = time.time()
        if self.collective_sync:
            tensor_specs = ray.get(self.groups["actor"].prepare_sync())[0]
            root = self.groups["actor"].workers[0]
            ray.get([root.broadcast_weights.remote()] + [e.receive_weights.remote(tensor_specs) for e in self.engines])
            return time.time() - t0
        refs = [
            r for part in ray.get(self.groups["actor"].weight_chunks(self.cfg.vllm_sync_chunk_mb << 20)) for r in part
        ]
        ray.get([e.load_weight_refs.remote(refs) for e in self.engines])
        return time.time() - t0

    # --- one iteration's calls (the controller, alignment.ppo.controller, makes them) ------------
    def generate(self, prompt_ids: list[list[int]], iteration: int) -> "ShardedRollout":
        """On the vLLM engines when there are any, else on the actor ranks (HF engine); started, not awaited."""
        generators = self.engines or self.groups["actor"].workers
        shards = split(len(prompt_ids), len(generators))
        return ShardedRollout(
            [
                g.generate.remote(prompt_ids[s:e], sampling_params(self.cfg, iteration, r, len(generators)))
                for r, (g, (s, e)) in enumerate(zip(generators, shards))
            ],
            [s for s, _ in shards],
        )

    def generate_turn(self, prompt_ids: list[list[int]], params: SamplingParams) -> Rollout:
        """One agent turn for each context, on the same generators as `generate` (shard r seeded apart)."""
        generators = self.engines or self.groups["actor"].workers
        shards = [(g, s, e) for g, (s, e) in zip(generators, split(len(prompt_ids), len(generators))) if e > s]
        seed = lambda r: None if params.seed is None else params.seed * len(generators) + r  # noqa: E731
        return ShardedRollout(
            [
                g.generate.remote(prompt_ids[s:e], dataclasses.replace(params, seed=seed(r)))
                for r, (g, s, e) in enumerate(shards)
            ],
            [s for _, s, _ in shards],
        ).get()

    def scores(self, queries: list[str], prompts: list[str], labels: list) -> Scored:
        import ray

        if self.function_reward is not None:
            return self.function_reward(queries, prompts, labels)
        group = self.groups["reward"]
        shards = split(len(queries), len(group.workers))
        return Scored.concat(
            ray.get(
                [w.scores.remote(queries[s:e], prompts[s:e], labels[s:e]) for w, (s, e) in zip(group.workers, shards)]
            )
        )

    def actor_logprobs(self, batch: SequenceBatch) -> Gathered:
        return Gathered(self.groups["actor"].logprobs(batch))

    def ref_logprobs(self, batch: SequenceBatch) -> Gathered:
        return Gathered(self.groups["ref"].logprobs(batch))

    def values(self, batch: SequenceBatch) -> Gathered:
        return Gathered(self.groups["critic"].values(batch))

    def train_critic(self, exp: Experience, seed: int) -> GroupMetrics:
        return GroupMetrics(self.groups["critic"].train(exp, 0.0, seed))

    def train_actor(self, exp: Experience, kl_coef: float, seed: int) -> GroupMetrics:
        return GroupMetrics(self.groups["actor"].train(exp, kl_coef, seed))

    # --- resumable state (alignment.training.checkpoint) -------------------------------------
    def _trained_groups(self) -> list[ModelGroup]:
        return [self.groups[r] for r in ("actor", "critic") if r in self.groups]

    def save(self, state: PPOState) -> None:
        import ray

        from alignment import storage
        from alignment.training import checkpoint

        cfg = self.cfg
        groups, version = self._trained_groups(), storage.new_version()
        ray.get([f for g in groups for f in g.save_checkpoint(cfg.ckpt_path, state.iteration)])
        # then each node's first rank of each group uploads its node's files (s3://): the driver's node
        # may hold none of them
        parts = ray.get([f for g in groups for f in g.upload_checkpoint(cfg.ckpt_path, state.iteration, version)])
        checkpoint.commit(
            cfg.ckpt_path,
            state.iteration,
            {"ppo": asdict(state)},
            cfg.max_ckpt_num,
            {"stage": "ppo", "config": public_dict(cfg)},
            self.actor_world,
            {k: v for p in parts for k, v in p.items()},
            version,
        )

    def resume(self) -> PPOState | None:
        """--load_checkpoint: the newest committed state, loaded into the groups; None to start fresh."""
        import ray

        from alignment.training import checkpoint

        ckpt = self.cfg.ckpt_path

        got = resume_state(self.cfg, lambda: checkpoint.find_latest(ckpt))  # the weights load on the workers' nodes
        if got is None:
            return None
        state, found = got
        ray.get([f for g in self._trained_groups() for f in g.load_checkpoint(self.cfg.ckpt_path, found.name)])
        self.sync_weights()  # the engines started from --pretrain
        return state

    def commit(self, metrics_dir: Path, final: dict[str, float], tracking: dict[str, str]) -> None:
        """The model, with what the driver wrote beside it (metrics.jsonl, TensorBoard events
        placed inside --save_path), committed by the actor group."""
        import ray

        files = {str(p.relative_to(metrics_dir)): p.read_bytes() for p in sorted(metrics_dir.rglob("*")) if p.is_file()}
        ray.get(
            self.groups["actor"].commit(
                self.cfg.save_path,
                {"stage": "ppo", "config": public_dict(self.cfg), "final_metrics": final, "tracking": tracking},
                files,
            )
        )


def run(cfg: PPOConfig) -> dict[str, float]:
    """Everything that can fail cheaply (prompts, reward function, sizes, resources) fails before
    any model loads."""
    import ray

    from alignment.datasets.prompts import load_prompts
    from alignment.models.loading import load_tokenizer
    from alignment.models.precision import check_ring_attention
    from alignment.ppo import runner
    from alignment.rewards.scorer import FunctionReward

    check_ring_attention(cfg.ring_attn_size, "cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = load_tokenizer(
        resolve_model_path(cfg.pretrain, revision=cfg.revision),
        cfg.tokenizer_chat_template,
        trust_remote_code=cfg.trust_remote_code,
        use_fast=not cfg.disable_fast_tokenizer,
    )
    prompts = load_prompts(cfg, tokenizer, cfg.prompt_data, cfg.prompt_split)
    function_reward = FunctionReward(cfg.remote_rm_url) if cfg.remote_rm_url else None
    check_sizes(cfg, placement.plan(cfg)[0].world_size)
    if not ray.is_initialized():
        ray.init(log_to_driver=True)  # inside a Ray job this joins the job's cluster
    groups = RayGroups(cfg, len(prompts), function_reward)
    # the driver's metrics go to the actor rank that commits the model (it may be on another node)
    with tempfile.TemporaryDirectory(prefix="alignflow-ppo-metrics-") as metrics_dir:
        logger = runner.run(cfg, groups, tokenizer, prompts, Path(metrics_dir), True)
        logger.close()
        groups.commit(Path(metrics_dir), logger.final(), logger.links)
    log.info("model committed: %s", cfg.save_path)
    return logger.final()
