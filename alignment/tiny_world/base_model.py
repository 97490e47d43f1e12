"""A seeded random-init tiny Llama plus the tiny tokenizer, saved as an HF model directory."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from alignment.tiny_world.paths import tiny_dir


def make_base(out: str | Path, seed: int = 0, config_overrides: dict | None = None) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    src = tiny_dir()
    config = LlamaConfig(**{**json.loads((src / "llama_config.json").read_text()), **(config_overrides or {})})
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    out = Path(out)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(src / "tokenizer").save_pretrained(out)
    return out
