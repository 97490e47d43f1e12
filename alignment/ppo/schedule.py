"""An RL run's schedule, shared by the controller and both backends: optimizer steps per iteration
(and the one error when the batch sizes don't fit), iterations per episode, each episode's prompt
order and each generator's sampling seed — all functions of the config and (seed, episode,
iteration), so a resumed run repeats exactly what the interrupted one would have done."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from alignment.config.base import require
from alignment.config.ppo import PPOConfig
from alignment.rollout.types import SamplingParams


def check_sizes(cfg: PPOConfig, world_size: int) -> int:
    """Optimizer steps per iteration per engine; one clear error when the batch sizes don't fit."""
    require(
        cfg.rollout.batch_size % world_size == 0,
        f"--rollout_batch_size {cfg.rollout.batch_size} is not divisible by world size {world_size}",
    )
    cfg.accumulation_steps(world_size)  # (samples a multiple of --train_batch_size: the config's check_ppo)
    return cfg.rollout.samples // cfg.train.batch_size * cfg.train.max_epochs


@dataclass(frozen=True)
class Sizes:
    """How long a run is and how big an iteration: computed once (`Sizes.of`) by the run's setup, read by the
    controller, the logger and the engines' learning-rate schedules."""

    samples_per_iteration: int  # --rollout_batch_size x --n_samples_per_prompt
    steps_per_iteration: int  # optimizer steps per engine in one iteration
    iterations_per_episode: int
    iterations: int  # over the run: --num_episodes x iterations_per_episode

    @property
    def total_steps(self) -> int:
        """Optimizer steps per engine over the run (the learning-rate schedule's length)."""
        return self.iterations * self.steps_per_iteration

    @staticmethod
    def of(cfg: PPOConfig, n_prompts: int, dp_size: int) -> "Sizes":
        """`dp_size`: the data-parallel controllers (launcher ranks, or one driver over the actor's replicas)."""
        per_episode = iterations_per_episode(n_prompts, cfg.rollout.batch_size)
        return Sizes(
            cfg.rollout.samples,
            check_sizes(cfg, dp_size),
            per_episode,
            cfg.train.num_episodes * per_episode,
        )


def iterations_per_episode(n_prompts: int, rollout_batch_size: int) -> int:
    return max(1, n_prompts // rollout_batch_size)


def prompt_order(n_prompts: int, seed: int, episode: int) -> list[int]:
    """A seeded shuffle per episode: each prompt is used once per episode, in a reproducible order."""
    order = list(range(n_prompts))
    random.Random(seed + episode).shuffle(order)
    return order


def sampling_params(cfg: PPOConfig, iteration: int, shard: int = 0, shards: int = 1) -> SamplingParams:
    """Shard k of `shards` generators samples with its own seed, a function of (--seed, iteration),
    so a resumed iteration draws the same samples."""
    return SamplingParams(
        cfg.rollout.max_new_tokens,
        cfg.rollout.temperature,
        cfg.rollout.top_p,
        cfg.rollout.n_samples_per_prompt,
        seed=cfg.train.seed * 100_003 + iteration * shards + shard,
        # the behaviour policy's log-probs: the ratio's denominator under --async_train on vLLM engines, and IS
        # correction's; an episode pool on the HF engine recomputes them on the actor (alignment/agents/pool.py)
        logprobs=(cfg.train.async_enable and cfg.vllm.num_engines > 0) or cfg.algo.advantage.is_correction_enable,
        max_total_len=cfg.data.max_len,
    )


def turn_params(params: SamplingParams, shard: int, shards: int) -> SamplingParams:
    """An agent turn's sampling on generator `shard` of `shards`: the turn's seed, spread apart per generator."""
    return replace(params, seed=None if params.seed is None else params.seed * shards + shard)
