"""The tiny visual world's model side: the tiny tokenizer plus an `<image>` token, a LLaVA processor, a
tiny LLaVA config (the tiny Llama behind a 2-layer CLIP vision tower), and the build of data/tiny_vision.

Plain transformers classes throughout: a base written by `make_vision_base` loads with
AutoModelForImageTextToText / AutoProcessor, no code of ours needed.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    CLIPImageProcessor,
    LlavaProcessor,
)

from alignment.tiny_world.build import write_jsonl
from alignment.tiny_world.paths import tiny_dir, tiny_vision_dir
from alignment.tiny_world.vision import VisionSpec, make_splits, render

IMAGE_TOKEN = "<image>"

# The tiny template, with list contents ([{"type": "image"}, {"type": "text", ...}]) rendered too: an image
# becomes `<image>`, which the processor expands to one token per image feature. A string content renders
# exactly as in the tiny template, so OpenRLHF's `<image>` tag in a string input works as well.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}{{ '<image>' }}{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

# 56 px in 7 px patches: an 8 x 8 grid, 64 image tokens (the CLS feature is dropped: strategy "default"). With
# 14 px patches (16 tokens, a digit split over several) SFT read the first digit and stalled on the second for
# 2,000+ steps; with 7 px it reads both after ~1,400 (CHANGELOG.md)
VISION_TOWER = {
    "model_type": "clip_vision_model",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "image_size": 56,
    "patch_size": 7,
}

# these split names, file places and keys as in the arithmetic world (alignment/tiny_world/build.py)
LAYOUT = {
    "sft_train": ("sft", "train.jsonl"),
    "sft_test": ("sft", "test.jsonl"),
    "pref_train": ("preference", "train.jsonl"),
    "pref_test": ("preference", "test.jsonl"),
    "rl_prompts": ("prompts", "train.jsonl"),
    "eval": ("prompts", "test.jsonl"),
}


def make_processor(tokenizer_dir: str | Path | None = None):
    """The tiny tokenizer (from data/tiny unless given) with `<image>` added, and a CLIP image processor
    at the tower's size."""

    tok = AutoTokenizer.from_pretrained(tokenizer_dir or tiny_dir() / "tokenizer")
    tok.init_kwargs.pop("local_files_only", None)  # how it was loaded (offline or not), not what it is
    tok.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    side = VISION_TOWER["image_size"]
    # The pictures are already side x side, so resize and crop change nothing; they stay on for a user's own
    # pictures. Mean and std 0.5 map every colour to [-1, 1]; CLIP's photo statistics would put white
    # at +2 and black at -1.8, an offset with no meaning for flat two-colour drawings.
    images = CLIPImageProcessor(
        size={"shortest_edge": side},
        crop_size={"height": side, "width": side},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    return LlavaProcessor(
        image_processor=images,
        tokenizer=tok,
        patch_size=VISION_TOWER["patch_size"],
        vision_feature_select_strategy="default",
        chat_template=CHAT_TEMPLATE,
        image_token=IMAGE_TOKEN,
        num_additional_image_tokens=1,  # the tower's CLS position, which "default" drops
    )


def llava_config(tok) -> dict:
    """The LLaVA fields: the tiny Llama (data/tiny/llama_config.json) as the language model."""
    text = json.loads((tiny_dir() / "llama_config.json").read_text())
    text.pop("architectures")
    text.update(vocab_size=len(tok), pad_token_id=tok.pad_token_id)
    return {
        "architectures": ["LlavaForConditionalGeneration"],
        "model_type": "llava",
        "text_config": text,
        "vision_config": VISION_TOWER,
        "image_token_index": tok.convert_tokens_to_ids(IMAGE_TOKEN),
        "vision_feature_select_strategy": "default",
        "vision_feature_layer": -1,
        "projector_hidden_act": "gelu",
        "tie_word_embeddings": True,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }


def build_vision(out: str | Path, seed: int = 0, spec: VisionSpec = VisionSpec()) -> Path:
    """Write data/tiny_vision: the JSONL splits, images/, tokenizer/ (also the processor) and llava_config.json."""
    out = Path(out)
    splits, pictures = make_splits(spec, seed)
    for name, (folder, filename) in LAYOUT.items():
        write_jsonl(out / folder / filename, splits[name])
    for path, pic in pictures.items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        render(pic, spec.size).save(out / path, optimize=True)
    proc = make_processor()
    proc.save_pretrained(out / "tokenizer")
    config = llava_config(proc.tokenizer)
    (out / "llava_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return out


def make_vision_base(out: str | Path, seed: int = 0) -> Path:
    """A seeded random-init tiny LLaVA with its processor and tokenizer, as an HF model directory."""

    src = tiny_vision_dir()
    fields = json.loads((src / "llava_config.json").read_text())
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config)
    out = Path(out)
    model.save_pretrained(out, safe_serialization=True)
    AutoProcessor.from_pretrained(src / "tokenizer").save_pretrained(out)
    return out
