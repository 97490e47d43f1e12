"""Token log-probabilities and the SFT negative log-likelihood.

Shapes: B batch rows, T tokens, V vocabulary.
"""

from __future__ import annotations

import torch


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """log p(x_t | x_<t) for t = 1..T-1.

    logits [B, T, V], input_ids [B, T] -> [B, T-1] (position t-1 predicts token t).
    Computed in fp32 so bf16 logits don't lose the small differences losses depend on.
    """
    logits = logits[:, :-1].float()
    targets = input_ids[:, 1:]
    return torch.gather(logits.log_softmax(-1), 2, targets.unsqueeze(-1)).squeeze(-1)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the distribution(s) over the last dimension, in fp32: [..., V] -> [...]."""
    logp = logits.float().log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each next-token distribution, in token_logprobs' layout: logits [B, T, V] -> [B, T-1]
    (position t-1's distribution, the one token t was drawn from)."""
    return entropy(logits[:, :-1])


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` over positions where mask is 1 (0 when the mask is empty)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def sft_loss(logits: torch.Tensor, input_ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Mean NLL over target tokens: -(1/N) sum_t m_t log p(x_t | x_<t).

    logits [B, T, V], input_ids [B, T], loss_mask [B, T] (1 on target tokens) -> scalar.
    """
    return -masked_mean(token_logprobs(logits, input_ids), loss_mask[:, 1:])
