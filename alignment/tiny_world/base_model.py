"""A seeded random-init tiny Llama (or, for MoE tests, a tiny Mixtral) plus the tiny tokenizer,
saved as an HF model directory."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from alignment import storage
from alignment.tiny_world.paths import tiny_dir


def make_base(out: str | Path, seed: int = 0, config_overrides: dict | None = None, arch: str = "llama") -> Path:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src = tiny_dir()
    fields = {**json.loads((src / f"{arch}_config.json").read_text()), **(config_overrides or {})}
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    out = Path(out)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(src / "tokenizer").save_pretrained(out)
    return out


def make_base_committed(uri: str, seed: int = 0, arch: str = "llama") -> str:
    """Write the base into the store (or a local dir) and commit it with a MANIFEST."""
    if storage.is_remote(uri):
        with tempfile.TemporaryDirectory(prefix="alignflow-base-") as tmp:
            storage.commit_dir(
                make_base(tmp, seed, arch=arch), uri, metadata={"stage": "tiny_base", "seed": seed, "arch": arch}
            )
    else:
        local = uri.removeprefix("file://")
        storage.remove(f"{local}/{storage.MANIFEST}")
        storage.commit_dir(
            make_base(local, seed, arch=arch), local, metadata={"stage": "tiny_base", "seed": seed, "arch": arch}
        )
    return uri
