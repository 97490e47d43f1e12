"""Preference losses on values computed by hand (numbers written out here, not recomputed)."""

import math

import pytest
import torch

from alignment.losses.logprobs import sequence_logps
from alignment.losses.preference import dpo_loss, kto_kl_estimate, kto_loss, pairwise_rm_loss

T = torch.tensor
# -log σ(1) = log(1 + e^-1) and -log σ(-1) = log(1 + e)
NLS_1, NLS_M1 = 0.31326169, 1.31326169


def close(x, expected):
    assert float(x) == pytest.approx(expected, abs=1e-6)


def test_rm_sigmoid_and_logexp():
    chosen, rejected = T([2.0, 0.0]), T([1.0, 1.0])  # differences +1, -1
    close(pairwise_rm_loss(chosen, rejected), (NLS_1 + NLS_M1) / 2)  # 0.81326169
    close(pairwise_rm_loss(chosen, rejected, kind="logexp"), 0.81326169)  # same function
    # margin 0.5 on the first pair: -log σ(0.5) = log(1 + e^-0.5) = 0.47407698
    close(pairwise_rm_loss(chosen, rejected, T([0.5, 0.0])), (0.47407698 + NLS_M1) / 2)
    # a reward gap of 100 (past fp32's exp range): finite, = the gap, and a finite gradient
    wide = T([0.0]).requires_grad_()
    loss = pairwise_rm_loss(wide, T([100.0]), kind="logexp")
    loss.backward()
    assert loss.item() == pytest.approx(100.0) and wide.grad.item() == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="unknown reward-model loss"):
        pairwise_rm_loss(chosen, rejected, kind="hinge")


def test_rm_center_term_pins_each_prompts_offset():
    chosen, rejected = T([2.0, 0.0]), T([1.0, 1.0])  # sums 3 and 1: + 0.01 · (9 + 1) / 2 = 0.05
    close(pairwise_rm_loss(chosen, rejected, center=0.01), (NLS_1 + NLS_M1) / 2 + 0.05)
    close(pairwise_rm_loss(chosen, rejected, kind="logexp", center=0.01), 0.81326169 + 0.05)
    # the same gap shifted by a prompt's offset: the plain loss cannot tell them apart, the centred one can
    shifted = pairwise_rm_loss(chosen + 5.0, rejected + 5.0, center=0.01)
    close(pairwise_rm_loss(chosen + 5.0, rejected + 5.0), (NLS_1 + NLS_M1) / 2)
    assert shifted.item() > pairwise_rm_loss(chosen, rejected, center=0.01).item()


def test_dpo_cdpo_ipo():
    # π_c - ref_c = 1, π_r - ref_r = -1 -> logits 2; β = 0.5 -> β·logits = 1
    args = (T([-1.0]), T([-3.0]), T([-2.0]), T([-2.0]))
    out = dpo_loss(*args, beta=0.5)
    close(out.loss, NLS_1)
    close(out.chosen_reward[0], 0.5)
    close(out.rejected_reward[0], -0.5)
    close(dpo_loss(*args, beta=0.5, label_smoothing=0.1).loss, 0.9 * NLS_1 + 0.1 * NLS_M1)  # 0.41326169
    close(dpo_loss(*args, beta=0.5, ipo=True).loss, 1.0)  # (2 - 1/(2·0.5))² = 1
    close(dpo_loss(*args, beta=0.25, ipo=True).loss, 0.0)  # (2 - 1/(2·0.25))² = 0


def test_dpo_gradient_pushes_chosen_up():
    pc = T([-1.0], requires_grad=True)
    pr = T([-1.0], requires_grad=True)
    dpo_loss(pc, pr, T([-1.0]), T([-1.0]), beta=1.0).loss.backward()
    assert pc.grad.item() == pytest.approx(-0.5) and pr.grad.item() == pytest.approx(0.5)  # ∓β·σ(0)


def test_kto():
    policy, ref, desirable = T([-1.0, -1.0]), T([-2.0, -0.5]), T([True, False])  # ρ = [1, -0.5]
    # desirable: 1 - σ(1 - 0.25); undesirable: 1 - σ(0.25 + 0.5); both 1 - σ(0.75) = 0.32082131
    out = kto_loss(policy, ref, desirable, T(0.25), beta=1.0)
    close(out.loss, 0.32082131)
    close(out.rewards[0], 1.0)
    close(kto_loss(policy, ref, desirable, T(0.25), 1.0, desirable_weight=2.0).loss, (2 * 0.32082131 + 0.32082131) / 2)
    # a negative KL estimate is clamped to 0: 1 - σ(1) = 0.26894142, 1 - σ(0.5) = 0.37754067
    close(kto_loss(policy, ref, desirable, T(-1.0), beta=1.0).loss, (0.26894142 + 0.37754067) / 2)
    close(kto_kl_estimate(T([-1.0, -2.0]), T([-1.5, -1.5])), 0.0)  # mean of (0.5, -0.5)


def test_sequence_logps_padded_and_packed():
    logits = torch.zeros(1, 4, 2)  # uniform over 2 tokens: log p = log 0.5 everywhere
    ids = T([[0, 1, 1, 0]])
    close(sequence_logps(logits, ids, T([[0, 1, 1, 0]]))[0], 2 * math.log(0.5))
    # packed: samples [0,1] and [1,0]; each sample's first token is not a target
    out = sequence_logps(logits, ids, T([[0, 1, 0, 1]]), segments=T([[0, 0, 1, 1]]), num_samples=2)
    assert out.tolist() == pytest.approx([math.log(0.5), math.log(0.5)])
