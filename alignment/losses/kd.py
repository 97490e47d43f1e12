"""Knowledge distillation on the response tokens: OpenRLHF's train_kd loss (its KDLoss, after MiniLLM's,
Gu et al. 2023, https://arxiv.org/abs/2306.08543).

    loss = (1 - c) · NLL + c · KD,   c = --kd_coef
    KD   = -(1/N) Σ_t m_t Σ_v p_T(v | x_<t) log p_S(v | x_<t)

KD is the cross-entropy of the student's next-token distribution p_S against the teacher's p_T,
averaged over the N target tokens (m_t = 1). It is the forward KL(p_T ‖ p_S) plus the teacher's
entropy, which does not depend on the student: forward KL's gradients, OpenRLHF's logged value.
One difference from OpenRLHF: the distribution predicting target token t (at position t - 1) is
the one compared, as in the NLL; OpenRLHF masks the logits at position t by token t's label.

Shapes: B rows, T tokens, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from alignment.losses.nll import masked_mean


@dataclass
class KDTerms:
    loss: torch.Tensor  # scalar: (1 - c) · nll + c · distil, what is backpropagated
    nll: torch.Tensor  # scalar: SFT's NLL on the target tokens
    distil: torch.Tensor  # scalar: teacher-student cross-entropy (OpenRLHF's distil_loss)
    kl: torch.Tensor  # scalar, detached: forward KL(p_T ‖ p_S) = distil - the teacher's entropy


def kd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    kd_coef: float,
) -> KDTerms:
    """student_logits, teacher_logits [B, T, V]; input_ids, loss_mask [B, T] (1 on target tokens).
    Position t - 1 predicts token t. Computed in fp32."""
    mask = loss_mask[:, 1:]  # [B, T-1]
    student = student_logits[:, :-1].float().log_softmax(-1)  # [B, T-1, V]
    teacher = teacher_logits[:, :-1].float().log_softmax(-1)  # [B, T-1, V]
    p_teacher = teacher.exp()
    # a token the student rules out (-inf logit) adds 0, not 0 · -inf = NaN, where the teacher gives it no mass
    cross = -torch.where(student.isinf(), 0.0, p_teacher * student).sum(-1)  # [B, T-1]
    entropy = -torch.special.xlogy(p_teacher, p_teacher).sum(-1)  # [B, T-1]
    nll = -masked_mean(student.gather(-1, input_ids[:, 1:, None]).squeeze(-1), mask)
    distil = masked_mean(cross, mask)
    loss = (1.0 - kd_coef) * nll + kd_coef * distil
    return KDTerms(loss, nll, distil, (distil - masked_mean(entropy, mask)).detach())
