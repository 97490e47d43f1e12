"""Router load-balancing loss for sparse mixture-of-experts models (Switch Transformer,
Fedus et al. 2021, eqs. 4-6, with top-k routing as in Mixtral).

    aux = E * sum_e f_e * P_e
    f_e: fraction of (token, k) routing slots sent to expert e   (counts, no gradient)
    P_e: mean router probability of expert e over tokens          (carries the gradient)

Both are averaged over every MoE layer's real tokens. A perfectly balanced router gives
aux = top_k (f_e = k/E, P_e = 1/E); collapse onto one expert pushes it toward E * k.
Computed here rather than by the model because the model's own version reads a 2-D padding
mask, while packed batches carry a [B, 1, T, T] block mask.
"""

from __future__ import annotations

import torch


def load_balancing_loss(
    router_logits: tuple[torch.Tensor, ...], top_k: int, token_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """router_logits: one [N, E] tensor per MoE layer (N = batch * seq tokens);
    token_mask: [N] 1 for real tokens, 0 for padding (None: all real). Returns a scalar."""
    num_experts = router_logits[0].shape[-1]
    slots = torch.zeros(num_experts, dtype=torch.float32, device=router_logits[0].device)
    probs = torch.zeros_like(slots)
    tokens = 0.0
    for logits in router_logits:
        p = torch.softmax(logits.float(), dim=-1)  # [N, E]
        mask = (
            torch.ones(p.shape[0], device=p.device)
            if token_mask is None
            else token_mask.reshape(-1).to(p.device, torch.float32)
        )  # [N]
        chosen = torch.topk(p, top_k, dim=-1).indices  # [N, k]
        slots = slots.scatter_add(0, chosen.reshape(-1), mask.repeat_interleave(top_k))
        probs = probs + (p * mask[:, None]).sum(0)
        tokens = tokens + mask.sum()
    return num_experts * torch.sum((slots / tokens) * (probs / tokens))
