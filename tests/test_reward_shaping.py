"""Per-token rewards from scores, on numbers worked out by hand."""

from __future__ import annotations

import torch

from alignment.losses.reward_shaping import last_token_index, token_rewards


def test_kl_on_every_token_score_on_the_last():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    kl = torch.tensor([[0.1, 0.2, -0.1, 9.0], [0.5, 0.0, 9.0, 9.0]])
    scores = torch.tensor([1.0, -2.0])
    r = token_rewards(scores, kl, mask, kl_coef=0.5)
    # row 0: -0.05, -0.1, +0.05 + 1.0 ; padding gets nothing
    # row 1: -0.25, 0 - 2.0
    expected = torch.tensor([[-0.05, -0.1, 1.05, 0.0], [-0.25, -2.0, 0.0, 0.0]])
    assert torch.allclose(r, expected)
    assert last_token_index(mask).tolist() == [2, 1]
