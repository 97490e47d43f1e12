"""Whether a model is a vision-language one, read from its config.json alone: model cards are written on the
Prefect side, which stays free of torch and transformers."""

from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub import hf_hub_download

from alignment.errors import UserError


class VisionModelError(UserError, ValueError):
    """A model, processor and images that don't go together; the message says which and what to pass."""


def is_vision_model(path: str) -> bool:
    """The model at `path` (a local folder or hub name) has an image encoder (its config has a vision_config).
    A local folder without config.json (a tokenizer alone) is no model, so not a vision-language one."""
    local = Path(path)
    if local.is_dir():
        config = local / "config.json"
        return config.is_file() and "vision_config" in json.loads(config.read_text())
    try:
        config = Path(hf_hub_download(path, "config.json"))
    except (OSError, ValueError) as e:  # a hub name whose config is neither cached nor reachable
        raise VisionModelError(
            f"{path}: its config.json could not be read ({str(e).splitlines()[0]}); download the model folder "
            f"and pass its path"
        ) from None
    return "vision_config" in json.loads(config.read_text())
