"""On-policy distillation (OpenRLHF's train_opd; Agarwal et al. 2024, "On-Policy Distillation of Language
Models", https://arxiv.org/abs/2306.13649; Thinking Machines' "On-Policy Distillation", 2025): the student π_S
samples a response y to a prompt and learns to lower its reverse KL to the frozen teacher π_T on y.

Sampled-token mode (--opd_topk 0). With log r_t = log π_S(y_t | y_<t) - log π_T(y_t | y_<t), the reverse KL
KL(π_S ‖ π_T) = E_{y~π_S} Σ_t log r_t has the score-function gradient E[Σ_t log r_t ∇ log π_S(y_t | y_<t)]
(a per-token REINFORCE with reward -log r_t; the future tokens' terms are dropped, as OpenRLHF does).
The loss's value is the chosen KL estimate (k1/k2/k3, alignment.losses.kl), its gradient that estimator:

    loss_t = kl_t.detach() + log r_t.detach() · log π_S(y_t) - (same).detach()

Top-K mode (--opd_topk K): the exact reverse KL over the student's K most likely tokens at each position,
plus one bucket holding the rest of both distributions' mass, at temperature τ (--opd_kd_temperature):

    KL_t = Σ_{v ∈ topK(q)} q_v (log q_v - log p_v) + q_rest (log q_rest - log p_rest)

Both are averaged over the response tokens (mask m_t = 1). Shapes: B rows, T tokens, V vocabulary;
position t - 1 predicts token t.
"""

from __future__ import annotations

import torch

from alignment.losses.kl import kl_estimate
from alignment.losses.nll import masked_mean, token_logprobs


def sampled_token_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    estimator: str = "k3",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, mean KL estimate detached): logits [B, T, V], input_ids and loss_mask [B, T]."""
    student = token_logprobs(student_logits, input_ids)  # [B, T-1]
    teacher = token_logprobs(teacher_logits, input_ids).detach()
    log_ratio = (student - teacher).detach()
    kl = kl_estimate(student.detach(), teacher, estimator)
    surrogate = log_ratio * student
    per_token = kl + surrogate - surrogate.detach()
    mask = loss_mask[:, 1:]
    return masked_mean(per_token, mask), masked_mean(kl, mask)


def topk_reverse_kl(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, k: int, temperature: float = 1.0
) -> torch.Tensor:
    """[B, T, V] x2 -> [B, T]: reverse KL over the student's top-k tokens plus the rest's bucket (fp32)."""
    k = min(k, student_logits.size(-1))
    log_q = (student_logits.float() / temperature).log_softmax(-1)
    log_p = (teacher_logits.detach().float() / temperature).log_softmax(-1)
    top = log_q.topk(k, dim=-1).indices
    log_q_k, log_p_k = log_q.gather(-1, top), log_p.gather(-1, top)
    q_k = log_q_k.exp()
    kl = (q_k * (log_q_k - log_p_k)).sum(-1)
    if k < student_logits.size(-1):  # the mass outside the top k, as one more outcome of both distributions
        q_rest = (1.0 - q_k.sum(-1)).clamp(1e-7, 1.0)
        p_rest = (1.0 - log_p_k.exp().sum(-1)).clamp(1e-7, 1.0)
        kl = kl + q_rest * (q_rest.log() - p_rest.log())
    return kl


def topk_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    loss_mask: torch.Tensor,
    k: int,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, the same detached) over the response tokens: the distributions at t - 1 that predict token t."""
    kl = topk_reverse_kl(student_logits[:, :-1], teacher_logits[:, :-1], k, temperature)
    loss = masked_mean(kl, loss_mask[:, 1:])
    return loss, loss.detach()
