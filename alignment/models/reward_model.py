"""Reward / critic models: a causal-LM backbone plus a scalar value head, in HF's
`*ForSequenceClassification` layout so `AutoModelForSequenceClassification.from_pretrained(path,
num_labels=1)` loads a saved one. The head is called `score` in memory; `--value_head_prefix`
renames it in the saved files (as OpenRLHF does), recorded in config.json.

The value is read at each sequence's last token (padded or packed) through a hook on the head,
so one forward gives every position's value: the RM uses the last one, PPO's critic all of them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import AutoModelForSequenceClassification

from alignment.models.loading import ModelLoadError, from_pretrained
from alignment.models.lora import is_lora

log = logging.getLogger(__name__)
HEAD = "score"


def load_reward_model(
    path: str,
    dtype: torch.dtype,
    attn: str,
    pad_token_id: int | None,
    flag: str = "--pretrain",
    load_in_4bit: bool = False,
    trust_remote_code: bool = False,
) -> torch.nn.Module:
    """From a causal LM (fresh head) or a saved reward model (its head, whatever its prefix)."""

    model = from_pretrained(
        AutoModelForSequenceClassification, path, dtype, attn, flag, load_in_4bit, trust_remote_code, num_labels=1
    )
    if not hasattr(model, HEAD):
        raise ModelLoadError(
            f"{flag} {path}: {type(model).__name__} has no '{HEAD}' head; alignflow's reward "
            f"models need a *ForSequenceClassification class with one (Llama, Qwen, Mistral, ...)"
        )
    prefix = getattr(model.config, "value_head_prefix", HEAD)
    if prefix != HEAD:
        _load_renamed_head(model, Path(path), prefix)
    model.config.pad_token_id = pad_token_id  # HF's own pooling (plain from_pretrained users) needs it
    return model


def _load_renamed_head(model: torch.nn.Module, path: Path, prefix: str) -> None:
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            if f"{prefix}.weight" in st.keys():
                head = getattr(model, HEAD)
                head.weight.data.copy_(st.get_tensor(f"{prefix}.weight").to(head.weight.dtype))
                return
    raise ModelLoadError(
        f"{path}: config.json says value_head_prefix={prefix!r} but no {prefix}.weight is in its safetensors files"
    )


def value_head(model: torch.nn.Module) -> torch.nn.Module:
    inner = model.get_base_model() if is_lora(model) else model
    return getattr(inner, HEAD)


class ValueCapture:
    """Holds the head's output [B, T] from the latest forward pass; with `scale` = (mean, std),
    as (output − mean) / std (a critic under --normalize_reward, see `critic_value_scale`)."""

    def __init__(self, model: torch.nn.Module, scale: tuple[float, float] | None = None):
        self.values: torch.Tensor | None = None
        self.scale = scale
        value_head(model).register_forward_hook(self._hook)

    def _hook(self, module: torch.nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        values = output.squeeze(-1)
        self.values = values if self.scale is None else (values - self.scale[0]) / self.scale[1]

    def take(self) -> torch.Tensor:
        values, self.values = self.values, None
        if values is None:
            raise RuntimeError("the value head did not run in the last forward pass")
        return values


def export_names(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Saved-file names: the head under --value_head_prefix."""
    if prefix == HEAD:
        return state
    return {(prefix + k[len(HEAD) :] if k.startswith(HEAD + ".") else k): v for k, v in state.items()}


def critic_value_scale(path: str | Path, normalize_reward: bool) -> tuple[float, float] | None:
    """How a critic's values are read under --normalize_reward (as OpenRLHF's critic): in the
    normalised reward's units, with the reward stats of the RM it starts from. Without them a
    critic initialised from the RM predicts raw RM scores against normalised returns (a value loss
    ~30 at the start on the tiny world) and PPO (gae) did not learn. None: raw values."""
    config = json.loads((Path(path) / "config.json").read_text())
    if not normalize_reward or "mean" not in config or "std" not in config:
        return None
    return float(config["mean"]), float(config["std"])


def read_reward_stats(path: str | Path) -> tuple[float, float]:
    """(mean, std) of the RM's rewards, written into config.json at the end of training."""
    config = json.loads((Path(path) / "config.json").read_text())
    if "mean" not in config or "std" not in config:
        raise ModelLoadError(f"{path}: config.json has no reward mean/std; was it trained by alignment.cli.train_rm?")
    return float(config["mean"]), float(config["std"])
