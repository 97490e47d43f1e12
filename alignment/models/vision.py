"""Vision-language models: their processor, their image inputs, and freezing their image encoder (telling one
from a text model: alignment/models/kind.py).

A vision-language model's tokenizer carries its processor (`tokenizer.processor`): the tokenizer travels to
every place that tokenizes, decodes and saves (trainers, engines, Ray workers), and those that meet images
reach the processor through it, instead of a second argument along each of those paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

from transformers import AutoConfig, AutoProcessor

from alignment.models.kind import VisionModelError


def attach_processor(
    path: str, tokenizer: PreTrainedTokenizerBase, flag: str, trust_remote_code: bool = False
) -> PreTrainedTokenizerBase:
    """`tokenizer` with the processor saved beside the vision-language model at `path` attached, after
    checking the processor marks images with the token the model reads them at."""

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
