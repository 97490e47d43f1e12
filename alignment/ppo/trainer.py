"""PPO without Ray: every model in this process group, one controller per rank, HF generation —
generate → make experience → advantages → train critic and actor. The per-model work is in
`alignment.ppo.rank_ops` and the experience math in `alignment.ppo.experience`, the same code
the Ray workers (`alignment.ppo.workers`) run.

Models: `actor` and `critic` are DeepSpeed engines (critic None for the critic-free estimators),
`ref` a frozen causal LM, `reward` any callable (queries, prompts, labels) -> [B] tensor.
Generation uses the batched HF engine on the actor's own module, so after each update the
engine already has the new weights.
"""
from __future__ import annotations

import logging
import random
import time
from typing import Any, Callable

import torch

from alignment.config.base import require
from alignment.config.ppo import PPOConfig
from alignment.datasets.prompts import PromptSample
from alignment.distributed.runtime import Runtime
from alignment.losses.kl import KLController
from alignment.models.reward_model import ValueCapture
from alignment.ppo import rank_ops
from alignment.ppo.batch import rollout_to_batch
from alignment.ppo.experience import Experience, assemble, experience_metrics, needs_old_logprobs, uses_reference
from alignment.ppo.packed import Packing
from alignment.rollout.hf_engine import HFEngine
from alignment.rollout.types import Rollout, SamplingParams
from alignment.trainers.base import mean_across_ranks, sum_across_ranks

log = logging.getLogger(__name__)


def check_sizes(cfg: PPOConfig, world_size: int) -> int:
    """Optimizer steps per iteration per engine; one clear error when the batch sizes don't fit."""
    require(cfg.rollout_batch_size % world_size == 0,
            f"--rollout_batch_size {cfg.rollout_batch_size} is not divisible by world size {world_size}")
    samples = cfg.rollout_batch_size * cfg.n_samples_per_prompt
    require(samples % cfg.train_batch_size == 0,
            f"--rollout_batch_size {cfg.rollout_batch_size} x --n_samples_per_prompt {cfg.n_samples_per_prompt} = "
            f"{samples} samples per iteration is not a multiple of --train_batch_size {cfg.train_batch_size}")
    cfg.accumulation_steps(world_size)
    return samples // cfg.train_batch_size * cfg.max_epochs


def iterations_per_episode(n_prompts: int, rollout_batch_size: int) -> int:
    return max(1, n_prompts // rollout_batch_size)


def prompt_order(n_prompts: int, seed: int, episode: int) -> list[int]:
    """A seeded shuffle per episode: each prompt is used once per episode, in a reproducible order."""
    order = list(range(n_prompts))
    random.Random(seed + episode).shuffle(order)
    return order


def sampling_params(cfg: PPOConfig, iteration: int, shard: int = 0, shards: int = 1) -> SamplingParams:
    return SamplingParams(cfg.generate_max_len, cfg.temperature, cfg.top_p, cfg.n_samples_per_prompt,
                          seed=cfg.seed * 100_003 + iteration * shards + shard)


def reward_inputs(tokenizer: Any, rollout: Rollout, prompts: list[PromptSample]) -> tuple[list, list, list]:
    """(queries, prompts, labels) for a reward source. The query is the prompt text as rendered +
    the response as generated (eos kept), never a re-decode of the prompt ids, so reward
    functions can split the two exactly."""
    src = [prompts[i] for i in rollout.prompt_index]
    responses = tokenizer.batch_decode(rollout.response_ids, skip_special_tokens=False)
    return [p.text + r for p, r in zip(src, responses)], [p.text for p in src], [p.label for p in src]


def score_rollout(reward: Callable, tokenizer: Any, rollout: Rollout, prompts: list[PromptSample],
                  clip: list[float]) -> torch.Tensor:
    """Scores [B], clipped."""
    return reward(*reward_inputs(tokenizer, rollout, prompts)).float().clamp(*clip)


class PPOTrainer:
    def __init__(self, cfg: PPOConfig, rt: Runtime, actor: Any, critic: Any | None, ref: torch.nn.Module | None,
                 reward: Callable[[list[str], list[str], list], torch.Tensor], tokenizer: Any,
                 prompts: list[PromptSample], critic_scale: tuple[float, float] | None = None,
                 packing: Packing | None = None):
        self.cfg, self.rt, self.actor, self.critic, self.ref, self.reward = cfg, rt, actor, critic, ref, reward
        self.packing = packing   # --packing_samples: the training and scoring forward passes on packed rows
        self.tokenizer, self.prompts = tokenizer, prompts
        self.gen = HFEngine(actor.module, tokenizer.eos_token_id, tokenizer.pad_token_id,
                            batch_size=max(cfg.micro_rollout_batch_size, 1), device=rt.torch_device)
        self.kl_ctl = KLController(cfg.init_kl_coef, cfg.kl_target, cfg.kl_horizon)
        self.capture = ValueCapture(critic.module, critic_scale) if critic is not None else None
        self.per_rank = cfg.rollout_batch_size // rt.world_size
        self.total_iterations = cfg.num_episodes * iterations_per_episode(len(prompts), cfg.rollout_batch_size)

    def prompt_batch(self, iteration: int) -> list[PromptSample]:
        """This rank's prompts of `iteration`."""
        episode, k = divmod(iteration, iterations_per_episode(len(self.prompts), self.cfg.rollout_batch_size))
        order = prompt_order(len(self.prompts), self.cfg.seed, episode)
        start = k * self.cfg.rollout_batch_size + self.rt.rank * self.per_rank
        return [self.prompts[i] for i in order[start:start + self.per_rank]]

    def make_experience(self, prompts: list[PromptSample], iteration: int) -> tuple[Experience, dict[str, float]]:
        cfg, micro = self.cfg, self.cfg.micro_rollout_batch_size
        t0 = time.time()
        rollout = self.gen.generate([p.ids for p in prompts],
                                    sampling_params(cfg, iteration, self.rt.rank, self.rt.world_size))
        t_gen = time.time() - t0
        batch = rollout_to_batch(rollout, self.tokenizer.pad_token_id)
        scores = score_rollout(self.reward, self.tokenizer, rollout, prompts, cfg.reward_clip_range)
        pk = self.packing
        old = rank_ops.logprobs(self.actor.module, batch, micro, pk) if needs_old_logprobs(cfg) else None
        ref = rank_ops.logprobs(self.ref, batch, micro, pk) if uses_reference(cfg) else None
        vals = rank_ops.values(self.critic.module, self.capture, batch, micro, pk) if self.critic is not None else None
        exp = assemble(cfg, batch, scores, old, ref, vals, self.kl_ctl.value, across=sum_across_ranks)
        metrics = experience_metrics(exp, rollout.finished)
        metrics.update(kl_coef=self.kl_ctl.value, time_generate=t_gen, time_experience=time.time() - t0 - t_gen)
        return exp, metrics

    def step(self, iteration: int) -> dict[str, float]:
        """One whole iteration; returns its metrics, averaged across ranks."""
        exp, metrics = self.make_experience(self.prompt_batch(iteration), iteration)
        t0 = time.time()
        seed = self.cfg.seed + iteration
        if self.critic is not None:
            metrics.update(rank_ops.train_critic(self.critic, self.capture, exp, self.cfg, seed, self.packing))
        if iteration >= self.cfg.freezing_actor_steps:
            metrics.update(rank_ops.train_actor(self.actor, exp, self.cfg, self.kl_ctl.value, seed, self.packing))
        metrics["time_train"] = time.time() - t0
        metrics = mean_across_ranks(metrics)
        # every rank updates β from the same, global KL, so the coefficients never drift apart
        self.kl_ctl.update(metrics.get("kl", 0.0), len(exp) * self.rt.world_size)   # no kl: no KL term, fixed β
        return metrics
