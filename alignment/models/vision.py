"""Vision-language models: telling one from a text model, its processor, its image inputs, and freezing its
image encoder.

A vision-language model's tokenizer carries its processor (`tokenizer.processor`): the tokenizer travels to
every place that tokenizes, decodes and saves (trainers, engines, Ray workers), and those that meet images
reach the processor through it, instead of a second argument along each of those paths.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch-free at import: model cards (imported by the Prefect side) ask is_vision_model
    import torch

from alignment.errors import UserError


class VisionModelError(UserError, ValueError):
    """A model, processor and images that don't go together; the message says which and what to pass."""


def is_vision_model(path: str, trust_remote_code: bool = False) -> bool:
    """The model at `path` (a local folder or hub name) has an image encoder (its config has a vision_config).
    A local folder without config.json (a tokenizer alone) is no model, so not a vision-language one."""
    local = Path(path)
    if local.is_dir():
        config = local / "config.json"
        return config.is_file() and "vision_config" in json.loads(config.read_text())
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except OSError as e:  # a hub name whose config is neither cached nor reachable (the tokenizer may be cached)
        raise VisionModelError(
            f"{path}: its config.json could not be read ({str(e).splitlines()[0]}); download the model folder "
            f"and pass its path"
        ) from None
    return getattr(config, "vision_config", None) is not None


def attach_processor(path: str, tokenizer: Any, flag: str, trust_remote_code: bool = False) -> Any:
    """`tokenizer` with the processor saved beside the vision-language model at `path` attached, after
    checking the processor marks images with the token the model reads them at."""
    from transformers import AutoConfig, AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError) as e:
        raise VisionModelError(
            f"{flag} {path}: a vision-language model without a loadable processor ({type(e).__name__}: "
            f"{' '.join(str(e).split())[:160]}); save its processor beside it (processor.save_pretrained(DIR))"
        ) from e
    if getattr(processor, "image_processor", None) is None:
        raise VisionModelError(
            f"{flag} {path}: the processor there ({type(processor).__name__}) has no image processor; save the "
            f"model's own processor beside it (AutoProcessor.from_pretrained(...).save_pretrained(DIR))"
        )
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    model_token = getattr(config, "image_token_id", None)
    if model_token is None:
        model_token = getattr(config, "image_token_index", None)
    proc_token = getattr(processor, "image_token_id", None)
    if proc_token is None:
        proc_token = tokenizer.convert_tokens_to_ids(getattr(processor, "image_token", "<image>"))
    if model_token is not None and proc_token != model_token:
        raise VisionModelError(
            f"{flag} {path}: the processor marks images with token {proc_token} but the model reads them at token "
            f"{model_token}: the processor belongs to another model; save this model's processor beside it"
        )
    processor.chat_template = tokenizer.chat_template  # --tokenizer_chat_template applies to both
    tokenizer.processor = processor
    return tokenizer


def freeze_visual_encoder(model: torch.nn.Module) -> int:
    """--freeze_visual_encoder: only the language model trains, as in OpenRLHF — every parameter outside the
    text decoder and the output head is frozen: the image encoder and its projector. The model says which its
    decoder is (LLaVA's `language_model`, Idefics3's `text_model`), not a naming rule. Returns how many froze."""
    language = {id(p) for p in model.get_decoder().parameters()}
    language |= {id(p) for p in model.get_output_embeddings().parameters()}
    frozen = 0
    for param in model.parameters():
        if id(param) not in language:
            param.requires_grad_(False)
            frozen += 1
    if not frozen:
        raise VisionModelError(
            "--freeze_visual_encoder: the model has no parameters outside its language model to freeze; drop the flag"
        )
    return frozen
