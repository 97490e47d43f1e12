"""Per-sequence log-probabilities: the quantity DPO, KTO and PPO compare between models.

Shapes: B rows, T tokens, V vocabulary, S samples (S = B when padded; packed rows hold several).
"""

from __future__ import annotations

import torch

from alignment.losses.nll import token_logprobs


def branched_token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, branches: torch.Tensor | None = None
) -> torch.Tensor:
    """token_logprobs [B, T-1], where entry [row, t - 1] is log p(token t) as always, except that a
    token listed in `branches` [K, 3] (row, t, parent) is predicted by the logits at `parent`, not at
    t - 1 (a response packed after another one over their shared prompt: it follows the prompt)."""
    lp = token_logprobs(logits, input_ids)
    if branches is None or not len(branches):
        return lp
    row, col, parent = branches.unbind(-1)
    moved = logits[row, parent].float().log_softmax(-1).gather(-1, input_ids[row, col, None]).squeeze(-1)
    return lp.index_put((row, col - 1), moved)


def sequence_logps(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    segments: torch.Tensor | None = None,
    num_samples: int | None = None,
    branches: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sum of log p(x_t | x_<t) over each sample's target tokens.

    logits [B, T, V], input_ids [B, T], loss_mask [B, T] (1 on response tokens);
    segments [B, T] sample index of each token when packed (None: one sample per row) -> [S];
    branches [K, 3] (row, t, parent): token t is predicted by the logits at `parent`, not at t - 1
    (a rejected response packed after the chosen one over their shared prompt).
    """
    lp = branched_token_logprobs(logits, input_ids, branches) * loss_mask[:, 1:].to(torch.float32)
    if segments is None:
        return lp.sum(-1)
    seg = segments[:, 1:].reshape(-1)  # token t's sample
    out = torch.zeros(num_samples or int(seg.max()) + 1, dtype=lp.dtype, device=lp.device)
    return out.index_add(0, seg, lp.reshape(-1))
