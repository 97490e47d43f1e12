"""Where the shipped tiny world lives (repo checkout or installed `alignflow.data`)."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path


def tiny_dir() -> Path:
    """data/tiny (installed: data/tiny): the generated splits, tokenizer/, llama_config.json and reward_func.py."""
    override = os.environ.get("ALIGNFLOW_TINY_DIR")
    if override:
        return Path(override)
    # a resource lookup, not an import: the files ship in the wheel as package data of alignflow.data
    # (the checkout's data/ folder); alignment imports nothing of alignflow (tests/test_layers.py)
    return Path(str(resources.files("alignflow.data"))) / "tiny"


def tiny_vision_dir() -> Path:
    """data/tiny_vision (installed: data/tiny_vision): the visual world's splits, images/, tokenizer/ (also the
    LLaVA processor) and llava_config.json."""
    override = os.environ.get("ALIGNFLOW_TINY_VISION_DIR")
    if override:
        return Path(override)
    return Path(str(resources.files("alignflow.data"))) / "tiny_vision"
