"""Process reward model: a causal LM read at the end of each reasoning step (OpenRLHF's train_prm and
its PRMLoss; the labelling after Math-Shepherd, Wang et al. 2023, https://arxiv.org/abs/2312.08935).

Each step of the input ends in a placeholder token. The logits AT a placeholder (those predicting the
next token) are the step's prediction; the label is a reward token ("+" / "-"), never an input token.

    hard labels:  loss = (1/N) Σ_n -log softmax(z_n[R])[y_n]
    soft labels:  loss = (1/N) Σ_n -(q_n log p_n(R_0) + (1 - q_n) log p_n(R_1)),   p_n = softmax(z_n[R])

over the N placeholder positions of the micro-batch; z_n [V] the logits at placeholder n, R the
--reward_tokens' ids (without them, the whole vocabulary and y_n a token id), y_n the label's index in
R, q_n ∈ [0, 1] the soft label: the probability that step n is good (R_0 the positive token). No other
position's logits enter the loss.

Shapes: B rows, T tokens, V vocabulary, N placeholders, K reward tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

IGNORE = -100.0  # the target of every position that is not a placeholder


@dataclass
class PRMTerms:
    loss: torch.Tensor  # scalar: mean cross-entropy over the placeholders, what is backpropagated
    accuracy: torch.Tensor  # scalar, detached: the argmax over R is the label (soft: the likelier side)
    steps: int  # N: placeholders in the micro-batch


def prm_loss(
    logits: torch.Tensor,
    placeholder_mask: torch.Tensor,
    targets: torch.Tensor,
    reward_token_ids: list[int] | None,
    soft: bool,
) -> PRMTerms:
    """logits [B, T, V]; placeholder_mask [B, T] bool; targets [B, T] float (IGNORE off placeholders):
    hard, the label's index in `reward_token_ids` (a token id without them); soft, q. In fp32."""
    at = logits[placeholder_mask].float()  # [N, V]
    if reward_token_ids is not None:
        at = at[:, reward_token_ids]  # [N, K]
    target = targets[placeholder_mask]  # [N]
    if at.shape[0] == 0:  # every placeholder truncated away: nothing to learn, a zero with a gradient
        return PRMTerms(logits.sum() * 0.0, torch.tensor(0.0), 0)
    if soft:
        q = torch.stack([target, 1.0 - target], dim=-1).float()  # [N, 2]
        loss = -(q * at.log_softmax(-1)).sum(-1).mean()
        label = (target < 0.5).long()  # index 0: the positive token
    else:
        label = target.long()  # [N]
        loss = F.cross_entropy(at, label)
    accuracy = (at.argmax(-1) == label).float().mean().detach()
    return PRMTerms(loss, accuracy, at.shape[0])


def positive_probability(logits: torch.Tensor, reward_token_ids: list[int]) -> torch.Tensor:
    """[N, V] logits at N placeholders -> [N] P(step is good): the first reward token's probability
    among the reward tokens (how the model was trained to answer)."""
    return logits[:, reward_token_ids].float().softmax(-1)[:, 0]
