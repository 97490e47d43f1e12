"""From sequence scores to per-token rewards, as OpenRLHF's `compute_reward` does.

Shapes: B sequences, T response tokens; `mask` [B, T] is 1 on real response tokens.
  token_rewards: r_t = −β·KL_t on every response token, plus the (clipped) score on the last one
  (Ziegler et al. 2019, arXiv:1909.08593, eq. 2). With --use_kl_loss, β = 0 here and the KL goes
  into the actor loss instead.
  overlong_penalty: DAPO's soft length penalty (Yu et al. 2025, arXiv:2503.14476, eq. 13), added to the score:
  0 up to L_max − buffer response tokens, then falling linearly to −factor at L_max.
  stop_properly: ProRL's penalty for responses cut at the length limit (OpenRLHF's
  apply_stop_properly_penalty): a cut response's score times coef in [0, 1], or coef itself when coef < 0.
"""

from __future__ import annotations

import torch


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """[B, T] -> [B]: position of each row's last response token (0 for an empty response)."""
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return (positions * mask.long()).max(dim=1).values


def token_rewards(scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """[B], [B, T], [B, T] -> [B, T]."""
    rewards = -kl_coef * kl.float() * mask
    rows = torch.arange(scores.shape[0], device=scores.device)
    rewards[rows, last_token_index(mask)] += scores.float()
    return rewards


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer: int, factor: float) -> torch.Tensor:
    """[B] response lengths -> [B] penalties in [−factor, 0]."""
    expected = max_len - buffer
    return (-(lengths.float() - expected) / buffer).clamp(-1.0, 0.0) * factor


def stop_properly(scores: torch.Tensor, finished: torch.Tensor, coef: float) -> torch.Tensor:
    """[B] scores, [B] bool (ended with eos) -> [B] scores, those of the unfinished (cut) responses
    scaled by `coef` (0 <= coef <= 1) or replaced by it (coef < 0)."""
    cut = ~finished.bool()
    penalised = torch.full_like(scores, coef) if coef < 0 else scores * coef
    return torch.where(cut, penalised, scores)
