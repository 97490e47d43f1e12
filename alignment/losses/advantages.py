"""Advantage estimators: the math of each one named in `alignment.losses.estimators` (which also
declares its whitening), group baselines registered by name (like verl's `register_adv_est`).

Shapes: B sequences, T response tokens; `mask` [B, T] is 1 on real response tokens.
Token-level estimators take per-token rewards [B, T] (the sequence reward on the last token,
minus the per-token KL penalty when KL is in the reward). Group estimators first turn the
sequence rewards of the n samples of each prompt into baselined scores [P, n]; the trainer then
spreads them over tokens as returns (see `reinforce_returns`).

Papers: GAE — Schulman et al. 2016 (arXiv:1506.02438), eq. 16; REINFORCE++ — Hu 2025
(arXiv:2501.03262); RLOO — Ahmadian et al. 2024 (arXiv:2402.14740), eq. 6; GRPO group
normalisation — Shao et al. 2024 (arXiv:2402.03300), eq. 3; Dr. GRPO (no std division) —
Liu et al. 2025 (arXiv:2503.20783).
"""

from __future__ import annotations

from typing import Callable

import torch

from alignment.losses.estimators import ESTIMATORS

GROUP_BASELINES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {}


def register_group(name: str):
    def wrap(fn):
        assert ESTIMATORS[name].group, f"{name} is not declared a group estimator"
        GROUP_BASELINES[name] = fn
        return fn

    return wrap


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lambd: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) [B, T]: δ_t = r_t + γ V_{t+1} − V_t, A_t = δ_t + γλ A_{t+1}; V after the end is 0."""
    rewards, values = rewards * mask, values * mask
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros_like(rewards[:, 0])
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = delta + gamma * lambd * running
        advantages[:, t] = running
        next_value = values[:, t]
    advantages = advantages * mask
    return advantages, (advantages + values) * mask


def reinforce_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Discounted reward-to-go G_t = r_t + γ G_{t+1} [B, T] (REINFORCE++'s advantage before whitening)."""
    rewards = rewards * mask
    out = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running
        out[:, t] = running
    return out * mask


@register_group("reinforce_baseline")
def mean_baseline(scores: torch.Tensor) -> torch.Tensor:
    """r − mean of the prompt's n samples. scores [P, n] -> [P, n]."""
    return scores - scores.mean(-1, keepdim=True)


@register_group("rloo")
def leave_one_out(scores: torch.Tensor) -> torch.Tensor:
    """r_i − mean of the *other* n−1 samples."""
    n = scores.shape[-1]
    return scores - (scores.sum(-1, keepdim=True) - scores) / (n - 1)


@register_group("group_norm")
def group_norm(scores: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(r − mean) / (std + eps) within the prompt's group (GRPO)."""
    return (scores - scores.mean(-1, keepdim=True)) / (scores.std(-1, keepdim=True) + eps)


@register_group("dr_grpo")
def group_mean(scores: torch.Tensor) -> torch.Tensor:
    """r − group mean, without dividing by the std (Dr. GRPO)."""
    return scores - scores.mean(-1, keepdim=True)


Sum = Callable[[torch.Tensor], torch.Tensor]  # a tensor -> its sum over every rank that holds part of the batch


def whiten(
    values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8, across: Sum | None = None, std: bool = True
) -> torch.Tensor:
    """(x − mean) / std over masked entries (OpenRLHF whitens GAE and REINFORCE++ advantages); `std` False:
    x − mean only (--no_std_norm). `across`: the batch is split over ranks; mean and variance are the whole batch's."""
    across = across or (lambda t: t)
    m = mask.to(values.dtype)
    n, total = across(torch.stack([m.sum(), (values * m).sum()]).double())
    mean = (total / n.clamp(min=1)).to(values.dtype)
    if not std:
        return (values - mean) * m
    var = (across(((((values - mean) * m) ** 2).sum()).double()) / n.clamp(min=1)).to(values.dtype)
    return (values - mean) * torch.rsqrt(var + eps) * m


def advantages_and_returns(
    estimator: str,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    n_samples: int,
    gamma: float = 1.0,
    lambd: float = 0.95,
    values: torch.Tensor | None = None,
    across: Sum | None = None,
    std_norm: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) [B, T] for any estimator; rows are grouped n_samples per prompt.
    `across`: the batch is split over ranks (each holds whole prompt groups); whitening is global.

    gae: GAE on the per-token rewards (returns stay raw: the critic's target).
    reinforce: discounted reward-to-go (REINFORCE++).
    group estimators: the sequence rewards (the sum of each row's per-token rewards) are baselined
    within the prompt's group, spread back as reward-to-go.
    Advantages are whitened where the estimator declares it (gae, reinforce, reinforce_baseline);
    RLOO, GRPO and Dr. GRPO keep their group scale. `std_norm` False (--no_std_norm): whitening subtracts the
    mean only.
    """
    spec = ESTIMATORS.get(estimator)
    if spec is None:
        raise ValueError(f"unknown advantage estimator {estimator!r}: use one of {', '.join(ESTIMATORS)}")
    if spec.critic:
        if values is None:
            raise ValueError(f"advantage estimator {estimator} needs the critic's values")
        adv, ret = gae(rewards, values, mask, gamma, lambd)
    elif not spec.group:
        adv = ret = reinforce_returns(rewards, mask, gamma)
    else:
        if n_samples < 2 or rewards.shape[0] % n_samples:
            raise ValueError(
                f"{estimator} needs groups of n_samples >= 2 rows; got {rewards.shape[0]} rows, n={n_samples}"
            )
        m = mask.to(rewards.dtype)
        scores = (rewards * m).sum(-1).view(-1, n_samples)
        baselined = GROUP_BASELINES[estimator](scores).reshape(-1)
        # put the baselined score where the sequence reward was: on the last token, then reward-to-go
        shifted = rewards * m - (scores.reshape(-1) - baselined)[:, None] * _last_token_onehot(m)
        adv = ret = reinforce_returns(shifted, mask, gamma)
    return (whiten(adv, mask, across=across, std=std_norm) if spec.whiten else adv), ret


def _last_token_onehot(mask: torch.Tensor) -> torch.Tensor:
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = (positions * (mask > 0).long()).max(dim=1, keepdim=True).values
    return (positions == last).to(mask.dtype) * (mask.sum(-1, keepdim=True) > 0)
