"""PPO's clipped policy loss (with dual clip) and clipped value loss. Shapes [B, T], mask 1 on response tokens.

Policy: Schulman et al. 2017 (arXiv:1707.06347), eq. 7, with separate low/high clip (DAPO's
"clip-higher", Yu et al. 2025, arXiv:2503.14476) and the dual clip of Ye et al. 2020
(arXiv:1912.09729), which bounds the loss for negative advantages at −c·A.
GSPO (Zheng et al. 2025, arXiv:2507.18071, `--policy_loss_type gspo`): the same clipped objective with one
importance ratio per sequence, s = exp(mean over its response tokens of log ρ_t), shared by its tokens.
Value: the clipped value loss of OpenAI baselines' PPO2.
`agg` turns the per-token losses into the scalar: the masked mean of these rows by default, or one
of `alignment.losses.aggregation`'s modes over the whole optimizer step.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch

from alignment.losses.nll import masked_mean

Agg = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (per-token loss [B, T], mask [B, T]) -> scalar


# log ρ is clamped before exp (as verl does): a token whose probability moved by e^20 is clipped by
# the objective anyway, and an unclamped exp overflows to inf (then NaN gradients) in bf16/fp32
LOG_RATIO_CLAMP = 20.0


def token_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T] ρ_t = π/π_old per token (PPO)."""
    return torch.exp((logp - old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


def sequence_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, 1] GSPO's s = exp(mean over the response of log ρ_t): the gradient flows through the mean of the
    sequence's log-ratios, as in OpenRLHF's and the paper's sequence-level form."""
    tokens = mask.sum(-1).clamp(min=1)  # [B]
    log_s = ((logp - old_logp) * mask).sum(-1) / tokens  # [B]
    return torch.exp(log_s.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).unsqueeze(-1)


Ratio = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    agg: Agg = masked_mean,
    weight: torch.Tensor | None = None,
    ratio_of: Ratio = token_ratio,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, clip fraction) of −min(ρA, clip(ρ, 1−ε_low, 1+ε_high)A) for the ratio `ratio_of` gives ([B, T] or
    [B, 1]), with the dual clip and each token's term times `weight` [B, T] when given (the engine/trainer
    weight: is_weights)."""
    ratio = ratio_of(logp, old_logp, mask)
    surr1 = ratio * advantages
    surr2 = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * advantages
    objective = torch.min(surr1, surr2)
    if dual_clip is not None:
        objective = torch.where(advantages < 0, torch.max(objective, dual_clip * advantages), objective)
    clipped = (surr2 < surr1).to(advantages.dtype)
    if weight is not None:
        objective = objective * weight
    return agg(-objective, mask), masked_mean(clipped, mask).detach()


gspo_loss = partial(policy_loss, ratio_of=sequence_ratio)


def is_weights(
    trainer_logp: torch.Tensor,
    engine_logp: torch.Tensor,
    mask: torch.Tensor,
    low: float,
    high: float,
    kind: str = "tis",
) -> torch.Tensor:
    """[B, T] importance weights of the sampled tokens (0 off the response), no gradient. The rollout engine
    (vLLM) and the trainer compute slightly different probabilities for the same weights, so its samples are
    off-policy for the trainer (Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy
    RL training"); w = π_trainer / π_engine per token, and as OpenRLHF's PolicyLoss:
    tis: w clamped to [low, high]; icepop: w where low <= w <= high, else 0 (the token is dropped);
    seq-mask-tis: w where the sequence's geometric-mean w is in [low, high], else 0 (the sequence is dropped)."""
    log_w = (trainer_logp - engine_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    w = torch.exp(log_w)
    if kind == "tis":
        out = w.clamp(min=low, max=high)
    elif kind == "icepop":
        out = w * ((w >= low) & (w <= high))
    elif kind == "seq-mask-tis":
        seq = torch.exp(masked_mean_rows(log_w, mask))
        out = w * ((seq >= low) & (seq <= high)).unsqueeze(-1)
    else:
        raise ValueError(f"is_weights: unknown kind {kind!r} (tis, icepop, seq-mask-tis)")
    return (out * mask).detach()


def masked_mean_rows(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B] mean of each row of `values` over its mask (0 for an empty row)."""
    m = mask.to(values.dtype)
    return (values * m).sum(-1) / m.sum(-1).clamp(min=1.0)


# --policy_loss_type: the actor's objective
POLICY_LOSSES = {"ppo": policy_loss, "gspo": gspo_loss}


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    value_clip: float | None = None,
    agg: Agg = masked_mean,
) -> torch.Tensor:
    """½·max((V − R)², (V_clipped − R)²), V_clipped = V_old + clip(V − V_old, ±c); plain ½(V − R)² without clip."""
    unclipped = (values - returns) ** 2
    if value_clip is None:
        return agg(0.5 * unclipped, mask)
    clipped_values = old_values + (values - old_values).clamp(-value_clip, value_clip)
    return agg(0.5 * torch.max(unclipped, (clipped_values - returns) ** 2), mask)
