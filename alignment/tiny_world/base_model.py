"""A seeded random-init tiny Llama plus the tiny tokenizer, saved as an HF model directory."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from alignment import storage
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


def make_base_committed(uri: str, seed: int = 0) -> str:
    """Write the base into the store (or a local dir) and commit it with a MANIFEST."""
    if storage.is_remote(uri):
        with tempfile.TemporaryDirectory(prefix="alignflow-base-") as tmp:
            storage.commit_dir(make_base(tmp, seed), uri, metadata={"stage": "tiny_base", "seed": seed})
    else:
        local = uri.removeprefix("file://")
        storage.remove(f"{local}/{storage.MANIFEST}")
        storage.commit_dir(make_base(local, seed), local, metadata={"stage": "tiny_base", "seed": seed})
    return uri
