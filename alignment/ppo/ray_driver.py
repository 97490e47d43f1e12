"""The single controller of PPO on Ray (OpenRLHF's design): this process — the driver inside the
Ray job — places the model groups, then for each iteration: generate (actor ranks, HF engine) →
make experience (actor/ref log-probs, critic values, rewards from the RM group or the driver's
reward function) → advantages (here) → train critic and actor (their groups, concurrently) → log.

Tensors move between groups through Ray's object store; with the HF engine inside the actor,
weight sync is a no-op by construction (the engine generates with the weights it trains).
"""
from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from alignment.config.base import public_dict
from alignment.distributed import placement
from alignment.losses.kl import KLController
from alignment.ppo.batch import SequenceBatch, rollout_to_batch
from alignment.ppo.experience import assemble, experience_metrics
from alignment.ppo.trainer import check_sizes, iterations_per_episode, prompt_order, reward_inputs, sampling_params
from alignment.rollout.types import Rollout

log = logging.getLogger("alignment.train_ppo_ray")


def split(n: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) ranges, sizes differing by at most one."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for k in range(parts):
        end = start + base + (k < extra)
        out.append((start, end))
        start = end
    return out


class ModelGroup:
    """The Ray actors (one per rank) of one model role, in its placement group's bundles."""

    def __init__(self, plan: placement.GroupPlan, pg: Any, gpu: bool):
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from alignment.ppo.workers import ModelWorker

        remote = ray.remote(ModelWorker)
        self.plan, self.workers = plan, [
            remote.options(num_cpus=plan.share, num_gpus=plan.share if gpu else 0,
                           scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i))
            .remote() for i in range(plan.world_size)]

    def init(self, cfg: Any, threads: int, total_steps: int) -> list:
        import ray
        master = ray.get(self.workers[0].address.remote())
        return [w.init.remote(self.plan.role, cfg, r, len(self.workers), self.plan.per_node, master, threads, total_steps)
                for r, w in enumerate(self.workers)]

    def map_rows(self, method: str, batch: SequenceBatch) -> list:
        """Futures of `method` on contiguous row shards of the batch, one per rank."""
        return [getattr(w, method).remote(batch.rows(s, e))
                for w, (s, e) in zip(self.workers, split(len(batch.prompt_index), len(self.workers)))]

    def call(self, method: str, *args: Any) -> list:
        return [getattr(w, method).remote(*args) for w in self.workers]


class RayPPO:
    def __init__(self, cfg: Any, tokenizer: Any, prompts: list, function_reward: Any | None):
        import ray

        self.cfg, self.tokenizer, self.prompts, self.function_reward = cfg, tokenizer, prompts, function_reward
        self.plans = placement.plan(cfg)
        self.world = next(p for p in self.plans if p.role == "actor").world_size
        self.steps_per_iteration = check_sizes(cfg, self.world)
        self.per_episode = iterations_per_episode(len(prompts), cfg.rollout_batch_size)
        self.total_iterations = cfg.num_episodes * self.per_episode
        resources = ray.cluster_resources()
        self.gpu = resources.get("GPU", 0) > 0
        kind = "GPU" if self.gpu else "CPU"
        placement.check_resources(self.plans, resources.get(kind, 0), kind)
        self.groups = self._place(ray, kind, resources)
        self.kl_ctl = KLController(cfg.init_kl_coef, cfg.kl_target, cfg.kl_horizon)

    def _place(self, ray: Any, kind: str, resources: dict) -> dict[str, ModelGroup]:
        from ray.util.placement_group import placement_group

        bundle = {"GPU": 1, "CPU": 1} if self.gpu else {"CPU": 1}
        pgs = {name: placement_group([dict(bundle)] * n, strategy="PACK")
               for name, n in placement.bundles_needed(self.plans).items()}
        ready, _ = ray.wait([pg.ready() for pg in pgs.values()], num_returns=len(pgs), timeout=300)
        if len(ready) < len(pgs):
            raise RuntimeError(f"placement groups not ready after 300 s ({kind} bundles requested: "
                               f"{placement.bundles_needed(self.plans)}; cluster: {resources})")
        cores = int(resources.get("CPU", 1) / max(1, len(ray.nodes())))
        threads = placement.threads_per_rank(self.plans, cores, self.cfg.num_threads)
        groups = {p.role: ModelGroup(p, pgs[p.bundle_set], self.gpu) for p in self.plans}
        total = self.total_iterations * self.steps_per_iteration
        ray.get([f for g in groups.values() for f in g.init(self.cfg, threads, total)])
        log.info("placed %s; %d threads per rank", ", ".join(f"{p.role} {p.nodes}x{p.per_node}"
                                                             + (f" on {p.bundle_set}'s bundles" if p.bundle_set != p.role else "")
                                                             for p in self.plans), threads)
        return groups

    # --- one iteration -------------------------------------------------------------------
    def prompt_batch(self, iteration: int) -> list:
        episode, k = divmod(iteration, self.per_episode)
        order = prompt_order(len(self.prompts), self.cfg.seed, episode)
        start = k * self.cfg.rollout_batch_size
        return [self.prompts[i] for i in order[start:start + self.cfg.rollout_batch_size]]

    def generate(self, prompts: list, iteration: int) -> Rollout:
        import ray
        actor = self.groups["actor"]
        shards = split(len(prompts), len(actor.workers))
        parts = ray.get([w.generate.remote([p.ids for p in prompts[s:e]],
                                           sampling_params(self.cfg, iteration, r, len(actor.workers)))
                         for r, (w, (s, e)) in enumerate(zip(actor.workers, shards))])
        rollout = Rollout()
        for part, (s, _) in zip(parts, shards):
            rollout.extend(part, index_offset=s)
        return rollout

    def scores(self, rollout: Rollout, prompts: list) -> torch.Tensor:
        import ray
        queries, texts, labels = reward_inputs(self.tokenizer, rollout, prompts)
        if self.function_reward is not None:
            scores = self.function_reward(queries, texts, labels)
        else:
            group = self.groups["reward"]
            shards = split(len(queries), len(group.workers))
            scores = torch.cat(ray.get([w.scores.remote(queries[s:e], texts[s:e], labels[s:e])
                                        for w, (s, e) in zip(group.workers, shards)]))
        return scores.float().clamp(*self.cfg.reward_clip_range)

    def step(self, iteration: int) -> dict[str, float]:
        import ray
        cfg = self.cfg
        t0 = time.time()
        prompts = self.prompt_batch(iteration)
        rollout = self.generate(prompts, iteration)
        t_gen = time.time()
        batch = rollout_to_batch(rollout, self.tokenizer.pad_token_id)
        futures = {"old": self.groups["actor"].map_rows("logprobs", batch),
                   "ref": self.groups["ref"].map_rows("logprobs", batch)}
        if "critic" in self.groups:
            futures["values"] = self.groups["critic"].map_rows("values", batch)
        scores = self.scores(rollout, prompts)
        out = {k: torch.cat(ray.get(v)) for k, v in futures.items()}
        exp = assemble(cfg, batch, scores, out["old"], out["ref"], out.get("values"), self.kl_ctl.value)
        metrics = experience_metrics(exp, rollout.finished)
        t_exp = time.time()
        seed = cfg.seed + iteration
        train = {}
        if "critic" in self.groups:
            train["critic"] = [w.train.remote(s, 0.0, seed) for w, s in
                               zip(self.groups["critic"].workers, exp.shards(len(self.groups["critic"].workers)))]
        if iteration >= cfg.freezing_actor_steps:
            train["actor"] = [w.train.remote(s, self.kl_ctl.value, seed) for w, s in
                              zip(self.groups["actor"].workers, exp.shards(self.world))]
        for futs in train.values():
            metrics.update(ray.get(futs)[0])     # already averaged across the group's ranks
        t_train = time.time()
        metrics.update(kl_coef=self.kl_ctl.value, time_generate=t_gen - t0, time_experience=t_exp - t_gen,
                       time_train=t_train - t_exp, time_sync=0.0)
        self.kl_ctl.update(metrics["kl"], len(exp))
        return metrics

    def commit(self, metrics_file: Path, final: dict[str, float]) -> None:
        import ray
        files = {"metrics.jsonl": metrics_file.read_bytes()} if metrics_file.exists() else {}
        ray.get(self.groups["actor"].call("commit", self.cfg.save_path,
                                          {"stage": "ppo", "config": public_dict(self.cfg), "final_metrics": final},
                                          files))


def run(cfg: Any) -> dict[str, float]:
    """Everything that can fail cheaply (prompts, reward function, sizes, resources) fails before
    any model loads."""
    import ray

    from alignment import storage
    from alignment.datasets.prompts import load_prompts
    from alignment.models.loading import load_tokenizer, resolve_model_path
    from alignment.rewards.scorer import FunctionReward
    from alignment.trainers.tracking import MetricsLogger

    tokenizer = load_tokenizer(resolve_model_path(cfg.pretrain), cfg.tokenizer_chat_template,
                               use_fast=not cfg.disable_fast_tokenizer)
    prompts = load_prompts(cfg, tokenizer, cfg.prompt_data, cfg.prompt_split)
    function_reward = FunctionReward(cfg.remote_rm_url) if cfg.remote_rm_url else None
    check_sizes(cfg, placement.plan(cfg)[0].world_size)
    if not ray.is_initialized():
        ray.init(log_to_driver=True)      # inside a Ray job this joins the job's cluster
    ppo = RayPPO(cfg, tokenizer, prompts, function_reward)
    log.info("PPO on Ray (%s): %d prompts, %d iterations of %d prompts x %d samples, %d optimizer steps per "
             "iteration", cfg.advantage_estimator, len(prompts), ppo.total_iterations, cfg.rollout_batch_size,
             cfg.n_samples_per_prompt, ppo.steps_per_iteration)
    storage.remove(f"{cfg.save_path.rstrip('/')}/{storage.MANIFEST}")
    metrics_dir = Path(tempfile.mkdtemp(prefix="alignflow-ppo-metrics-"))
    logger = MetricsLogger(cfg, metrics_dir, True, ppo.total_iterations, "ppo")
    for it in range(ppo.total_iterations):
        metrics = ppo.step(it)
        logger.advance()
        if (it + 1) % cfg.logging_steps == 0 or it + 1 == ppo.total_iterations:
            logger.log(it + 1, {f"train/{k}": v for k, v in metrics.items()})
    logger.close()
    ppo.commit(logger.path, logger.history[-1] if logger.history else {})
    log.info("model committed: %s", cfg.save_path)
    return logger.history[-1] if logger.history else {}
