"""LoRA adapters through peft; merged into the base weights when the model is saved."""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from alignment.config.base import ConfigError


def apply_lora(
    model: torch.nn.Module, rank: int, alpha: int, dropout: float, target_modules: list[str], task: str = "CAUSAL_LM"
) -> torch.nn.Module:
    """task SEQ_CLS (reward/critic models) also trains the value head in full."""
    if rank <= 0:
        return model
    from peft import LoraConfig, TaskType, get_peft_model

    targets: str | list[str] = "all-linear" if target_modules == ["all-linear"] else target_modules
    cfg = LoraConfig(
        task_type=TaskType[task], r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none"
    )
    return get_peft_model(model, cfg)


def check_targets(path: str, targets: list[str], extra: tuple[str, ...] = (), trust_remote_code: bool = False) -> None:
    """--target_modules must name modules of the model: checked on a weightless (meta-device) copy
    built from config.json, so a typo fails in one line before the weights load, not in peft after.
    `extra`: modules the loaded model adds (a reward model's value head)."""
    if targets == ["all-linear"]:
        return

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(
            AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code), trust_remote_code=trust_remote_code
        )
    names = [n for n, _ in skeleton.named_modules()] + list(extra)
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        linear = sorted({n.rsplit(".", 1)[-1] for n, m in skeleton.named_modules() if isinstance(m, torch.nn.Linear)})
        raise ConfigError(
            f"--target_modules {' '.join(missing)}: no such module in {path}; its linear layers are "
            f"{', '.join(linear)} (or pass all-linear)"
        )


def merge_adapter(base: torch.nn.Module, adapter_dir: str) -> torch.nn.Module:
    """`base` with the PEFT adapter saved in `adapter_dir` folded into its weights: PEFT's own
    merge_and_unload, in place, so merging holds one copy of the model."""
    from peft import PeftModel

    return PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")


def merged_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The plain model's weights from a PEFT model's full `state` (its own copy: it is consumed):
    each adapter folded into its base weight in place, W += scaling·B·A, so the merge adds no second
    copy of the model (merge_and_unload on a deep copy would). Keys as the plain model names them."""
    for name, layer in model.named_modules():
        scaling = getattr(layer, "scaling", None)
        if not isinstance(scaling, dict) or "default" not in scaling or not hasattr(layer, "lora_A"):
            continue
        a, b = state.pop(f"{name}.lora_A.default.weight"), state.pop(f"{name}.lora_B.default.weight")
        weight = state[f"{name}.base_layer.weight"]
        delta = (b.float() @ a.float()) * scaling["default"]
        weight.add_((delta.T if getattr(layer, "fan_in_fan_out", False) else delta).to(weight.dtype))
    plain: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if ".original_module." in key or ".lora_" in key:
            continue  # a fully trained module's frozen original (its trained copy is kept), other adapters
        key = (
            key.removeprefix("base_model.model.").replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")
        )
        plain[key] = value
    return plain
