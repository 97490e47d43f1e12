"""A seeded random-init tiny Llama (or, for MoE tests, a tiny Mixtral; or the tiny visual world's LLaVA)
plus the tiny tokenizer, saved as an HF model directory."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from alignment import storage
from alignment.tiny_world.paths import tiny_dir
from alignment.tiny_world.vision_model import make_vision_base


def make_base(out: str | Path, seed: int = 0, config_overrides: dict | None = None, arch: str = "llama") -> Path:
    src = tiny_dir()
    fields = {**json.loads((src / f"{arch}_config.json").read_text()), **(config_overrides or {})}
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    out = Path(out)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(src / "tokenizer").save_pretrained(out)
    return out


def make_any_base(out: str | Path, seed: int = 0, arch: str = "llama") -> Path:
    """make_base, or for arch "llava" the tiny visual world's LLaVA (alignment/tiny_world/vision_model.py)."""
    if arch == "llava":
        return make_vision_base(out, seed)
    return make_base(out, seed, arch=arch)


def make_base_committed(uri: str, seed: int = 0, arch: str = "llama") -> str:
    """Write the base into the store (or a local dir) and commit it with a MANIFEST."""
    if storage.is_remote(uri):
        with tempfile.TemporaryDirectory(prefix="alignflow-base-") as tmp:
            storage.commit_dir(
                make_any_base(tmp, seed, arch), uri, metadata={"stage": "tiny_base", "seed": seed, "arch": arch}
            )
    else:
        local = uri.removeprefix("file://")
        storage.remove(f"{local}/{storage.MANIFEST}")
        storage.commit_dir(
            make_any_base(local, seed, arch), local, metadata={"stage": "tiny_base", "seed": seed, "arch": arch}
        )
    return uri
