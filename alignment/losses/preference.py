"""Preference losses as pure functions of rewards or log-probabilities. Shapes: [N] pairs/samples.

Reward model (Bradley-Terry; Ouyang et al. 2022, "Training language models to follow
instructions with human feedback", eq. 1):
    sigmoid:  -log σ(r_c - r_r - margin)
    logexp:    log(1 + exp(r_r - r_c))   (the same function written as softplus; no margin)
    + center · (r_c + r_r)²   (TRL's center_rewards_coefficient; Eisenstein et al. 2023, "Helping or Herding?
              Reward Model Ensembles Mitigate but do not Eliminate Reward Hacking"): the pairwise loss leaves
              each prompt's reward offset free; this term pins it, so a right answer scores about +d and a
              wrong one about −d whatever the prompt, and a threshold (dynamic sampling's range) means the same
              on every prompt.
DPO (Rafailov et al. 2023, "Direct Preference Optimization"), with h = β·[(π_c - ref_c) - (π_r - ref_r)]:
    dpo:      -log σ(h)
    cDPO:     -(1-ε) log σ(h) - ε log σ(-h)   (conservative DPO, label smoothing ε; Mitchell 2023)
    IPO:      ((π_c - ref_c) - (π_r - ref_r) - 1/(2β))²   (Azar et al. 2023, "A General
              Theoretical Paradigm to Understand Learning from Human Preferences", eq. 17)
KTO (Ethayarajh et al. 2024, "KTO: Model Alignment as Prospect Theoretic Optimization", eq. 7-8),
with ρ = π(y|x) - ref(y|x) and z the detached, clamped-at-0 KL estimate:
    desirable:    λ_D (1 - σ(β(ρ - z)))
    undesirable:  λ_U (1 - σ(β(z - ρ)))
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def pairwise_rm_losses(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    margin: torch.Tensor | None = None,
    kind: str = "sigmoid",
    center: float = 0.0,
) -> torch.Tensor:
    """Per-pair loss [N]. chosen, rejected, margin: [N]; center: the (r_c + r_r)² term's coefficient."""
    if kind == "sigmoid":
        losses = -F.logsigmoid(chosen - rejected - (margin if margin is not None else 0.0))
    elif kind == "logexp":  # softplus: log1p(exp(x)) overflows to inf in fp32 once x passes ~88
        losses = F.softplus(rejected - chosen)
    else:
        raise ValueError(f"unknown reward-model loss {kind!r}: use sigmoid or logexp")
    return losses + center * (chosen + rejected) ** 2 if center else losses


def pairwise_rm_loss(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    margin: torch.Tensor | None = None,
    kind: str = "sigmoid",
    center: float = 0.0,
) -> torch.Tensor:
    """Mean pairwise loss over pairs -> scalar."""
    return pairwise_rm_losses(chosen, rejected, margin, kind, center).mean()


@dataclass
class DPOOutput:
    loss: torch.Tensor  # scalar
    chosen_reward: torch.Tensor  # [N] β(π_c - ref_c), detached
    rejected_reward: torch.Tensor  # [N] β(π_r - ref_r), detached


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float,
    label_smoothing: float = 0.0,
    ipo: bool = False,
) -> DPOOutput:
    """All inputs are summed response log-probs [N]."""
    logits = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)  # [N]
    if ipo:
        losses = (logits - 1.0 / (2.0 * beta)) ** 2
    else:
        losses = -F.logsigmoid(beta * logits) * (1.0 - label_smoothing) - F.logsigmoid(-beta * logits) * label_smoothing
    return DPOOutput(
        losses.mean(),
        (beta * (policy_chosen - ref_chosen)).detach(),
        (beta * (policy_rejected - ref_rejected)).detach(),
    )


def kto_kl_estimate(policy_mismatched: torch.Tensor, ref_mismatched: torch.Tensor) -> torch.Tensor:
    """Mean log-ratio on mismatched (prompt, other sample's response) pairs, without gradient.
    Inputs [M] -> scalar. The caller averages it across ranks; `kto_loss` clamps it at 0."""
    return (policy_mismatched - ref_mismatched).mean().detach()


@dataclass
class KTOOutput:
    loss: torch.Tensor  # scalar, mean over samples
    rewards: torch.Tensor  # [N] β ρ, detached


def kto_loss(
    policy: torch.Tensor,
    ref: torch.Tensor,
    desirable: torch.Tensor,
    kl: torch.Tensor,
    beta: float,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> KTOOutput:
    """policy, ref: summed log-probs [N]; desirable: bool [N]; kl: scalar estimate (clamped at 0 here)."""
    kl = kl.detach().clamp(min=0)
    rho = policy - ref
    good = desirable_weight * (1.0 - torch.sigmoid(beta * (rho - kl)))
    bad = undesirable_weight * (1.0 - torch.sigmoid(beta * (kl - rho)))
    losses = torch.where(desirable, good, bad)
    return KTOOutput(losses.mean(), (beta * rho).detach())
