"""Loss math on hand-computed values (no DeepSpeed, no Ray)."""

import math

import torch

from alignment.losses.nll import masked_mean, sft_loss, token_logprobs


def test_token_logprobs_hand_computed():
    # vocab of 2, uniform logits at step 0, [0, ln 3] at step 1
    logits = torch.tensor([[[0.0, 0.0], [0.0, math.log(3.0)], [5.0, 5.0]]])
    ids = torch.tensor([[0, 1, 0]])
    lp = token_logprobs(logits, ids)
    assert lp.shape == (1, 2)
    assert torch.allclose(lp, torch.tensor([[math.log(0.5), math.log(0.25)]]))  # p(0 | step 1) = 1/(1+3)


def test_sft_loss_averages_only_masked_targets():
    logits = torch.tensor([[[0.0, 0.0], [0.0, math.log(3.0)], [5.0, 5.0]]])
    ids = torch.tensor([[0, 1, 0]])
    # target 1 (token at t=1) excluded, target 2 (token at t=2, p=0.25) included
    loss = sft_loss(logits, ids, torch.tensor([[0, 0, 1]]))
    assert torch.allclose(loss, torch.tensor(-math.log(0.25)))
    both = sft_loss(logits, ids, torch.tensor([[0, 1, 1]]))
    assert torch.allclose(both, torch.tensor(-(math.log(0.5) + math.log(0.25)) / 2))


def test_masked_mean_empty_mask_is_zero():
    assert masked_mean(torch.tensor([1.0, 2.0]), torch.tensor([0, 0])).item() == 0.0
