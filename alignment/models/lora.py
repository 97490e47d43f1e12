"""LoRA adapters through peft; merged into the base weights when the model is saved."""
from __future__ import annotations

from typing import Any

import torch


def apply_lora(model: torch.nn.Module, rank: int, alpha: int, dropout: float, target_modules: list[str],
               task: str = "CAUSAL_LM") -> torch.nn.Module:
    """task SEQ_CLS (reward/critic models) also trains the value head in full."""
    if rank <= 0:
        return model
    from peft import LoraConfig, TaskType, get_peft_model

    targets: Any = "all-linear" if target_modules == ["all-linear"] else target_modules
    cfg = LoraConfig(task_type=TaskType[task], r=rank, lora_alpha=alpha, lora_dropout=dropout,
                     target_modules=targets, bias="none")
    return get_peft_model(model, cfg)


def check_targets(path: str, targets: list[str], extra: tuple[str, ...] = (), trust_remote_code: bool = False) -> None:
    """--target_modules must name modules of the model: checked on a weightless (meta-device) copy
    built from config.json, so a typo fails in one line before the weights load, not in peft after.
    `extra`: modules the loaded model adds (a reward model's value head)."""
    if targets == ["all-linear"]:
        return
    from transformers import AutoConfig, AutoModelForCausalLM

    from alignment.config.base import ConfigError

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code),
                                                    trust_remote_code=trust_remote_code)
    names = [n for n, _ in skeleton.named_modules()] + list(extra)
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        linear = sorted({n.rsplit(".", 1)[-1] for n, m in skeleton.named_modules() if isinstance(m, torch.nn.Linear)})
        raise ConfigError(f"--target_modules {' '.join(missing)}: no such module in {path}; its linear layers are "
                          f"{', '.join(linear)} (or pass all-linear)")


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")


def merged_copy(model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A plain HF model with the adapters in `state_dict` merged (the trained model is untouched)."""
    import copy

    clone = copy.deepcopy(model).to("cpu")
    clone.load_state_dict(state_dict, strict=True)
    return clone.merge_and_unload()
