"""How per-token losses [B, T] become one micro-batch's loss, so that an optimizer step's gradient does
not depend on how the step is cut into micro-batches and ranks (verl's `loss_agg_mode`).

DeepSpeed divides each micro-batch's loss by the G accumulation steps and averages the gradients of
the D data-parallel ranks, so a micro-batch's sum is multiplied by G·D and divided by the step's
total, counted over all G·D micro-batches (`StepTotals`):

    token-mean:               Σ_tokens ℓ            · G·D / N_tokens(step)   every token weighs the same
    seq-mean-token-mean:      Σ_seqs mean_tokens ℓ  · G·D / N_seqs(step)     every sequence weighs the same
    seq-mean-token-sum-norm:  Σ_seqs Σ_tokens ℓ / L · G·D / N_seqs(step)     Dr. GRPO (Liu et al. 2025,
                              arXiv:2503.20783, eq. 4): a constant L (generate_max_len), no length bias

With one micro-batch on one rank, token-mean is the masked mean of the micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from alignment.losses.estimators import LOSS_AGG_MODES


@dataclass(frozen=True)
class StepTotals:
    tokens: float  # response tokens in the whole optimizer step (all its micro-batches, all ranks)
    seqs: float  # sequences in the whole optimizer step
    scale: float  # G·D: accumulation steps × data-parallel ranks

    @classmethod
    def single(cls, mask: torch.Tensor) -> "StepTotals":
        """The totals of a step that is this one micro-batch on one rank."""
        return cls(float(mask.sum()), float(mask.shape[0]), 1.0)


def aggregate(
    loss: torch.Tensor, mask: torch.Tensor, mode: str, totals: StepTotals, norm_len: int | None = None
) -> torch.Tensor:
    """[B, T] per-token losses -> this micro-batch's scalar share of the step's loss."""
    m = mask.to(loss.dtype)
    if mode == "token-mean":
        return (loss * m).sum() * (totals.scale / max(totals.tokens, 1.0))
    per_seq = (loss * m).sum(-1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / m.sum(-1).clamp(min=1)
    elif mode == "seq-mean-token-sum-norm":
        if not norm_len:
            raise ValueError("seq-mean-token-sum-norm needs norm_len (the longest response, generate_max_len)")
        per_seq = per_seq / norm_len
    else:
        raise ValueError(f"unknown loss aggregation {mode!r}: use one of {', '.join(LOSS_AGG_MODES)}")
    return per_seq.sum() * (totals.scale / max(totals.seqs, 1.0))
