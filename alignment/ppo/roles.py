"""Building each PPO model role, written once for both backends: `train_ppo` builds all of them in each of
the launcher's ranks (alignment/cli/train_ppo.py), `train_ppo_ray` each in its own group's actors
(alignment/ppo/workers.py). Same weights, learning rates and devices either way."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

from alignment.config.placement import PlacementRef
from alignment.config.ppo import PPOConfig
from alignment.distributed.runtime import Runtime
from alignment.models.builder import ModelSetup, load_actor, load_value_model
from alignment.models.loading import load_causal_lm, resolve_model_path
from alignment.models.reward_model import critic_value_scale
from alignment.rewards.scorer import FunctionReward, RewardModels, make_reward
from alignment.training.engine import build_engine

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine


def actor(cfg: PPOConfig, rt: Runtime, setup: ModelSetup, total_steps: int) -> DeepSpeedEngine:
    """The policy's DeepSpeed engine (--actor_learning_rate)."""
    return build_engine(load_actor(setup, cfg), cfg, rt, setup.precision.bf16, total_steps, cfg.actor.adam.lr)


def critic(
    cfg: PPOConfig, rt: Runtime, setup: ModelSetup, total_steps: int
) -> tuple[DeepSpeedEngine, tuple[float, float] | None]:
    """The critic's engine (--critic_learning_rate) and its value scale. It starts from --critic_pretrain,
    else the (first) reward model, else the policy, as OpenRLHF's does."""
    source = cfg.critic.model_name_or_path or (
        cfg.reward.model_name_or_path.split(",")[0] if cfg.reward.model_name_or_path else cfg.model.model_name_or_path
    )
    critic_setup = dataclasses.replace(setup, path=resolve_model_path(source, "--critic_pretrain"))
    engine = build_engine(
        load_value_model(critic_setup, cfg), cfg, rt, setup.precision.bf16, total_steps, cfg.critic.adam.lr
    )
    return engine, critic_value_scale(critic_setup.path, cfg.reward.normalize_enable)


def reference(ref: PlacementRef, setup: ModelSetup, device: torch.device | str) -> torch.nn.Module:
    """The frozen reference policy (--ref_reward_offload puts it on the CPU)."""
    model = load_causal_lm(setup.path, setup.precision.dtype, setup.attn, trust_remote_code=setup.trust_remote_code)
    return model.to("cpu" if ref.ref_reward_offload else device).eval().requires_grad_(False)


def reward(cfg: PPOConfig, setup: ModelSetup, device: torch.device | str) -> FunctionReward | RewardModels:
    """The reward source: reward model(s), a reward server or a reward_func file (alignment/rewards/scorer.py)."""
    where = "cpu" if cfg.ref.ref_reward_offload else str(device)
    return make_reward(cfg, setup.tokenizer, setup.precision.dtype, setup.attn, where)
