"""Sparse mixture-of-experts support: --aux_loss_coef and ZeRO-3 leaf modules.

Only the model's config is read here, so an --aux_loss_coef on a dense model fails before any
weights load.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

import torch
from deepspeed.utils import set_z3_leaf_modules
from transformers import AutoConfig

from alignment.losses.moe import load_balancing_loss
from alignment.models.loading import ModelLoadError

if TYPE_CHECKING:
    from alignment.datasets.batch import Batch

log = logging.getLogger(__name__)


def moe_top_k(path: str, aux_loss_coef: float, trust_remote_code: bool = False) -> int:
    """Experts per token of the model at `path` when --aux_loss_coef > 0 (0 when the flag is off);
    a dense model is refused with one line."""
    if aux_loss_coef <= 0:
        return 0

    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    top_k = getattr(config, "num_experts_per_tok", None)
    if not hasattr(config, "output_router_logits") or not top_k:
        raise ModelLoadError(
            f"--aux_loss_coef {aux_loss_coef}: {path} is a dense {config.model_type} model with no "
            f"MoE router to balance; drop the flag (it applies to sparse-MoE models such as Mixtral)"
        )
    return int(top_k)


def sparse_moe_blocks(model: torch.nn.Module) -> list[type]:
    """The classes of the model's sparse-MoE blocks (MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock, ...)."""
    return sorted(
        {type(m) for m in model.modules() if type(m).__name__.endswith("SparseMoeBlock")}, key=lambda t: t.__name__
    )


def mark_zero3_leaves(model: torch.nn.Module) -> None:
    """Under ZeRO-3 a token routes to a data-dependent subset of experts, so ranks would fetch
    different expert parameters and the collective gathers hang; as leaf modules, each MoE block
    is gathered whole. A no-op on dense models."""
    blocks = sparse_moe_blocks(model)
    if blocks:
        set_z3_leaf_modules(model, blocks)
        log.info("ZeRO-3 leaf modules: %s", ", ".join(b.__name__ for b in blocks))


@contextmanager
def routed(model: torch.nn.Module, top_k: int) -> Iterator[list[torch.Tensor]]:
    """While inside: every MoE block's router logits, as the forward passes compute them (nothing when top_k is
    0). Read by hooks on each block's gate, not through `output_router_logits`: with that flag the model computes
    its own aux loss from the attention mask, which fails on packed [B, 1, T, T] masks."""
    captured: list[torch.Tensor] = []
    hooks = (
        []
        if not top_k
        else [
            m.gate.register_forward_hook(
                lambda _m, _in, out: captured.append(out[0] if isinstance(out, tuple) else out)
            )
            for m in getattr(model, "module", model).modules()
            if type(m).__name__.endswith("SparseMoeBlock")
        ]
    )
    try:
        yield captured
    finally:
        for h in hooks:
            h.remove()


def forward_with_aux(model: torch.nn.Module, batch: Batch, top_k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[B, T, V] logits and the router load-balancing loss over the batch's real tokens (None
    when top_k is 0: a dense model, or --aux_loss_coef off)."""
    with routed(model, top_k) as captured:
        logits = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            use_cache=False,
            **batch.images,  # a vision-language model's image tensors (none for text)
        ).logits
    if not top_k:
        return logits, None
    return logits, load_balancing_loss(tuple(captured), top_k, real_tokens(batch))


def real_tokens(batch: Batch) -> torch.Tensor:
    """[B*T] 1 where a token is a sample's, 0 on padding, for padded and packed batches."""
    if batch.packed:
        return (batch.segment_map >= 0).reshape(-1).float()
    return batch.attention_mask.reshape(-1).float()
