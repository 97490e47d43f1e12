"""PPO's Ray backend of `alignment.ppo.controller.ModelGroups` (OpenRLHF's design), which
`alignment.cli.train_ppo_ray` runs `alignment.ppo.run` on: this process — the driver inside the Ray job —
places the model groups and is the one controller; each typed call sends work to a group's ranks
(generation on the actor ranks' HF engine or the vLLM engines, log-probs, values, rewards from the RM
group or the driver's reward function, training).

Tensors move between groups through Ray's object store. With the HF engine inside the actor,
weight sync is a no-op by construction (the engine generates with the weights it trains); with
vLLM engines (--vllm_num_engines), the actor's weights go to them after every actor update in
bounded chunks through the object store (`sync_weights`).
"""

from __future__ import annotations

import logging
import tempfile
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Iterator

import ray
import torch

from alignment.config.base import ConfigError
from alignment.config.placement import TRAINED, Role
from alignment.config.ppo import PPOConfig
from alignment.datasets.images import PromptImages
from alignment.distributed import cluster, placement
from alignment.ppo import ray_state
from alignment.ppo.batch import SequenceBatch
from alignment.ppo.dispatch import Joined, call
from alignment.ppo.engines import VLLMEngines
from alignment.ppo.experience import Experience
from alignment.ppo.groups import ModelGroup
from alignment.ppo.loop import PPOState
from alignment.ppo.run import Staging
from alignment.ppo.schedule import sampling_params, turn_params
from alignment.ppo.workers import ModelWorker
from alignment.rewards.scorer import FunctionReward, Scored
from alignment.rollout.types import Rollout, SamplingParams
from alignment.training import checkpoint
from alignment.training.tracking import MetricsLogger

log = logging.getLogger("alignment.train_ppo_ray")


def data_parallel(cfg: PPOConfig, plans: list) -> int:
    """The actor's data-parallel replicas, once --ds_tensor_parallel_size divides each trained group's ranks
    (before anything is placed)."""
    tp = cfg.ds.tensor_parallel_size
    for p in plans:
        if p.role in TRAINED and p.world_size % tp:
            raise ConfigError(
                f"--ds_tensor_parallel_size {tp} does not divide the {p.role}'s {p.world_size} ranks: give the "
                f"{p.role} a multiple of {tp} (--{p.role}_num_nodes x --{p.role}_num_gpus_per_node)"
            )
    return next(p for p in plans if p.role == Role.ACTOR).world_size // tp


class RayGroups:
    rank, world = 0, 1  # one controller, in the driver: it sees every row of the iteration

    def __init__(self, cfg: PPOConfig, plans: list, total_steps: int, function_reward: FunctionReward | None):
        """`plans`: placement.plan(cfg), checked by `data_parallel`; `total_steps`: the run's (schedule.Sizes)."""
        self.cfg, self.function_reward = cfg, function_reward
        tp = cfg.ds.tensor_parallel_size
        self.actor_world = next(p for p in plans if p.role == Role.ACTOR).world_size
        placed = cluster.place(plans, placement.ask(plans), "ppo")
        threads = cluster.threads_per_rank(plans, placed.cores_per_node, cfg.train.num_threads)
        engine_cores, trainer_cores = cluster.split_cores(
            placed.cores_per_node, cfg.vllm.num_engines * cfg.vllm.tensor_parallel_size
        )
        vllm = next((p for p in plans if p.role == "vllm"), None)
        self.engines = VLLMEngines(cfg, placed, vllm, engine_cores) if vllm else None
        self.groups = {p.role: ModelGroup(p, placed, tp if p.role in TRAINED else 1) for p in plans if p.role != "vllm"}
        cores = trainer_cores if vllm and not placed.gpu else None  # off the cores the engines bound
        ray.get([f for g in self.groups.values() for f in g.init(cfg, threads, total_steps, cores)]
                + (self.engines.ready() if self.engines else []))  # fmt: skip
        if self.engines:
            self.engines.open_sync_group(self.groups[Role.ACTOR])
        self.has_critic = Role.CRITIC in self.groups
        shared = [f" on {p.bundle_set}'s bundles" if p.bundle_set != p.role else "" for p in plans]
        log.info("placed %s; %d threads per rank",
                 ", ".join(f"{p.role} {p.nodes}x{p.per_node}{s}" for p, s in zip(plans, shared)), threads)  # fmt: skip
        nodes = {role: g.call(ModelWorker.node_id).get() for role, g in self.groups.items()}
        log.info("ranks by Ray node (%d nodes in the cluster): %s", len(ray.nodes()),
                 "; ".join(f"{role} {' '.join(n[:12] for n in ids)}" for role, ids in nodes.items()))  # fmt: skip

    def sync_weights(self) -> float:
        """The actor's new weights to the vLLM engines (seconds); the HF engine on the actor needs none."""
        return self.engines.sync_weights(self.groups[Role.ACTOR]) if self.engines else 0.0

    # --- one iteration's calls (the controller, alignment.ppo.controller, makes them) ------------
    def _generators(self) -> tuple[list, int]:
        """The actors that generate, and how many of them make one generator: the vLLM engines one each, the
        actor ranks (HF engine) a tensor-parallel replica each. A replica's ranks get the same prompts and seed
        and all-reduce the same logits, so they sample the same tokens and stop together: no rank waits on
        another replica (HF's synced_gpus would, and hang where a replica has no prompts)."""
        if self.engines:
            return self.engines.actors, 1
        return self.groups[Role.ACTOR].workers, self.groups[Role.ACTOR].tp

    def generate(
        self, prompt_ids: list[list[int]], iteration: int, images: list[PromptImages] | None = None
    ) -> Joined[Rollout]:
        """On the vLLM engines when there are any, else on the actor ranks (HF engine); started, not awaited.
        `images`: each prompt's (a vision-language actor's; HF engine only, a config check says)."""
        params_for = partial(sampling_params, self.cfg, iteration)
        return call(*self._generators(), ModelWorker.generate, prompt_ids, params_for, images)

    def generate_turn(
        self, prompt_ids: list[list[int]], params: SamplingParams, images: list[PromptImages] | None = None
    ) -> Rollout:
        """One agent turn for each context, on the same generators as `generate`; `images`: each context's (a
        vision-language policy's episodes)."""
        return call(*self._generators(), ModelWorker.generate, prompt_ids, partial(turn_params, params), images).get()

    def scores(self, queries: list[str], prompts: list[str], labels: list) -> Scored:
        if self.function_reward is not None:
            return self.function_reward(queries, prompts, labels)
        return self.groups[Role.REWARD].call(ModelWorker.scores, queries, prompts, labels).get()

    def actor_logprobs(self, batch: SequenceBatch) -> Joined[torch.Tensor]:
        return self.groups[Role.ACTOR].call(ModelWorker.logprobs, batch)

    def ref_logprobs(self, batch: SequenceBatch) -> Joined[torch.Tensor]:
        return self.groups[Role.REF].call(ModelWorker.logprobs, batch)

    def values(self, batch: SequenceBatch) -> Joined[torch.Tensor]:
        return self.groups[Role.CRITIC].call(ModelWorker.values, batch)

    def train_critic(self, exp: Experience, seed: int) -> Joined[dict[str, float]]:
        return self.groups[Role.CRITIC].call(ModelWorker.train, exp, 0.0, seed)

    def train_actor(self, exp: Experience, kl_coef: float, seed: int) -> Joined[dict[str, float]]:
        return self.groups[Role.ACTOR].call(ModelWorker.train, exp, kl_coef, seed)

    # --- resumable state (alignment/ppo/ray_state.py) ----------------------------------------
    def _trained(self) -> list[ModelGroup]:
        return [self.groups[r] for r in TRAINED if r in self.groups]

    def save(self, state: PPOState) -> None:
        ray_state.save(self._trained(), self.cfg, state, self.actor_world)

    def mark_best(self, iteration: int) -> None:
        checkpoint.mark_best(self.cfg.ckpt.path, iteration)

    def resume(self) -> PPOState | None:
        state = ray_state.resume(self._trained(), self.cfg)
        if state is not None:
            self.sync_weights()  # the engines started from --pretrain
        return state

    # --- the run's output (alignment/ppo/run.py) ------------------------------------------------
    @contextmanager
    def staging(self) -> Iterator[Staging]:
        """The driver's metrics, passed to the actor rank that commits the model (it may be on another node)."""
        with tempfile.TemporaryDirectory(prefix="alignflow-ppo-metrics-") as metrics_dir:
            yield Staging(Path(metrics_dir), True)

    def commit(self, staged: Staging, logger: MetricsLogger) -> None:
        if self.cfg.critic.save_value_network:  # the critic's files, placed under critic/ in the actor's commit
            critic = self.groups[Role.CRITIC].call(ModelWorker.value_model_files).get()
            for name, data in next(f for f in critic if f).items():
                (staged.dir / "critic" / name).parent.mkdir(parents=True, exist_ok=True)
                (staged.dir / "critic" / name).write_bytes(data)
        ray_state.commit(self.groups[Role.ACTOR], self.cfg, staged.dir, logger.final(), logger.links)
        log.info("model committed: %s", self.cfg.ckpt.output_dir)
