"""Save an HF-format model (safetensors) from a DeepSpeed engine, ZeRO-3 and LoRA included."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from alignment.models.lora import is_lora, merged_state

log = logging.getLogger(__name__)


def full_state_dict(engine: Any) -> dict[str, torch.Tensor] | None:
    """The whole model's weights on rank 0 (None on other ranks). Collective: call on every rank."""
    if engine.zero_optimization_stage() == 3:
        state = engine._zero3_consolidated_16bit_state_dict()
    else:
        state = {k: v.detach().cpu().clone() for k, v in engine.module.state_dict().items()}
    rank = dist.get_rank() if dist.is_initialized() else 0
    return state if rank == 0 else None


def policy_weights(engine: Any) -> dict[str, torch.Tensor] | None:
    """The weights a rollout engine needs, under their HF names: LoRA adapters merged into the
    base (so engines that know nothing of LoRA, like vLLM, can take them). Collective; rank 0 only."""
    state = full_state_dict(engine)
    if state is None or not is_lora(engine.module):
        return state
    return merged_state(engine.module, state)


def save_hf_model(module: torch.nn.Module, state: dict[str, torch.Tensor], tokenizer: Any,
                  out_dir: str | Path, extra_config: dict[str, Any] | None = None,
                  rename: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None = None) -> Path:
    """Write config, safetensors weights (in the training dtype) and tokenizer, so plain
    `from_pretrained(out_dir)` loads it. `extra_config` entries go into config.json;
    `rename` maps the final (merged) weight names to the saved ones. A LoRA model is saved twice
    over: its adapter as PEFT saves it in `out_dir/adapter` (`PeftModel.from_pretrained(base,
    out_dir/adapter)`), and merged into the base at `out_dir`, merged in place in `state` (which is
    consumed), so saving never holds a second copy of the model."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if is_lora(module):
        module.save_pretrained(out / "adapter", state_dict=state, safe_serialization=True)
        model = module.get_base_model()
        state = merged_state(module, state)
    else:
        model = module
    for key, value in (extra_config or {}).items():
        setattr(model.config, key, value)
    state = {k: v.contiguous() for k, v in (rename(state) if rename else state).items()}
    model.save_pretrained(out, state_dict=state, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out
