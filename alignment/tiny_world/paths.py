"""Where the shipped tiny world lives (repo checkout or installed `alignflow.data`)."""
from __future__ import annotations

import os
from pathlib import Path


def tiny_dir() -> Path:
    """alignflow/data/tiny: the generated splits, tokenizer/, llama_config.json and reward_func.py."""
    override = os.environ.get("ALIGNFLOW_TINY_DIR")
    if override:
        return Path(override)
    try:
        import alignflow.data
        return Path(alignflow.data.__file__).parent / "tiny"
    except ImportError:
        return Path(__file__).resolve().parents[2] / "alignflow" / "data" / "tiny"
