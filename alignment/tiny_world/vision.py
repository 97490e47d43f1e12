"""The tiny visual world: a small picture of a sum ("3+5"); the model reads it and answers "3 + 5 = 8".

The answer is the arithmetic world's response format, so its reward (alignment/tiny_world/reward.py:
the last number equals the label) scores it unchanged. Deterministic (seeded): a rebuild renders the
same pixels. Rows use OpenRLHF-style keys plus `images`, a list of paths relative to the split's folder:
  SFT         {"input", "output", "images"}
  preference  {"prompt", "chosen", "rejected", "label", "images"} (rejected = a near-miss wrong sum)
  RL prompts  {"input", "label", "images"}
  eval        {"input", "label", "images"}
Eval images are renderings of their own, never used by a training split.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageFont

from alignment.tiny_world.arithmetic import Problem, wrong_answer

# OpenRLHF's convention: an `<image>` tag in a string input marks where the picture goes
QUESTION = "<image>What is the sum in the image?"


@dataclass(frozen=True)
class VisionSpec:
    """How hard the task is. The default is the easiest world (one font, dark on light, the sum centred): a
    random-init tiny LLaVA reads the first digit early and the second only after a plateau of 1,000+ steps
    (CHANGELOG.md). More fonts, colours and jitter make a harder world, which stayed at chance within 2,000
    steps."""

    max_operand: int = 9  # a, b in [0, max_operand]
    size: int = 56  # square canvas, the vision tower's image_size
    font_sizes: tuple[int, ...] = (22,)
    jitter: int = 0  # most px off centre (56: anywhere the text fits)
    # (ink, paper); e.g. add ((255, 255, 255), (0, 0, 0)) so the tower cannot key on one brightness
    colours: tuple[tuple[tuple[int, int, int], tuple[int, int, int]], ...] = (((0, 0, 0), (255, 255, 255)),)
    n_train: int = 3000  # training renderings: SFT sees the first n_sft, RL and preference pairs all
    n_sft: int = 2000
    n_eval: int = 300
    n_pref_test: int = 200


@dataclass(frozen=True)
class Picture:
    problem: Problem
    text: str  # what is drawn: "a+b", maybe with spaces
    font_size: int
    ink: tuple[int, int, int]
    paper: tuple[int, int, int]
    x: int
    y: int


def sample_picture(spec: VisionSpec, rng: random.Random) -> Picture:
    a, b = rng.randint(0, spec.max_operand), rng.randint(0, spec.max_operand)
    text = f"{a}{rng.choice(['+', ' + '])}{b}"
    size = rng.choice(spec.font_sizes)
    ink, paper = rng.choice(spec.colours)
    left, top, right, bottom = _font(size).getbbox(text)
    x = _jittered(rng, left, right, spec.size, spec.jitter)
    y = _jittered(rng, top, bottom, spec.size, spec.jitter)
    return Picture(Problem(a, "+", b), text, size, ink, paper, x, y)


def _jittered(rng: random.Random, lo: int, hi: int, size: int, jitter: int) -> int:
    """Where to draw text spanning [lo, hi) from its origin: up to `jitter` px off centre, all of it inside."""
    centre = (size - (hi - lo)) // 2 - lo
    first, last = max(-lo, centre - jitter), min(size - hi, centre + jitter)
    return rng.randint(first, max(first, last))


def _font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)


def render(pic: Picture, size: int) -> Image.Image:
    """Two colours, no anti-aliasing: the PNG is a few hundred bytes and its pixels do not depend on
    how FreeType smooths edges."""
    img = Image.new("P", (size, size), 0)
    img.putpalette([*pic.paper, *pic.ink])  # index 0 paper, 1 ink
    draw = ImageDraw.Draw(img)
    draw.fontmode = "1"
    draw.text((pic.x, pic.y), pic.text, fill=1, font=_font(pic.font_size))
    return img


def image_path(pool: str, i: int) -> str:
    return f"images/{pool}/{i:05d}.png"


def row_path(path: str) -> str:
    """An image path as a split's rows name it: relative to the split's own folder (sft/, prompts/, ...), where
    alignflow looks for a relative image after the working directory (alignment/datasets/image_rows.py)."""
    return f"../{path}"


def sft_row(pic: Picture, path: str) -> dict:
    return {"input": QUESTION, "output": pic.problem.response(), "images": [row_path(path)]}


def prompt_row(pic: Picture, path: str) -> dict:
    return {"input": QUESTION, "label": str(pic.problem.answer), "images": [row_path(path)]}


def preference_row(pic: Picture, path: str, rng: random.Random) -> dict:
    p = pic.problem
    return {
        "prompt": QUESTION,
        "chosen": p.response(),
        "rejected": p.response(wrong_answer(p, rng)),
        "label": str(p.answer),
        "images": [row_path(path)],
    }


def make_splits(spec: VisionSpec = VisionSpec(), seed: int = 0) -> tuple[dict[str, list[dict]], dict[str, Picture]]:
    """(splits, {image path: picture}). Two pools of renderings: `train` (SFT, RL prompts, preference
    pairs) and `test` (eval, SFT test = the first 100 eval rows, preference test after them).

    As in the arithmetic world SFT sees only the first `n_sft` training pictures while RL prompts list
    the ones SFT has not seen first, so `--max_samples N` gives RL new pictures."""
    rng = random.Random(seed)
    pictures = {}
    for pool, n in (("train", spec.n_train), ("test", spec.n_eval + spec.n_pref_test)):
        for i in range(n):
            pictures[image_path(pool, i)] = sample_picture(spec, rng)
    train = [(pic, path) for path, pic in pictures.items() if path.startswith("images/train/")]
    test = [(pic, path) for path, pic in pictures.items() if path.startswith("images/test/")]
    evals, pref_test = test[: spec.n_eval], test[spec.n_eval :]
    pref_rng = random.Random(seed + 1)  # its own stream: the pictures stay as they were
    splits = {
        "sft_train": [sft_row(pic, path) for pic, path in train[: spec.n_sft]],
        "sft_test": [sft_row(pic, path) for pic, path in evals[:100]],
        "pref_train": [preference_row(pic, path, pref_rng) for pic, path in train],
        "pref_test": [preference_row(pic, path, pref_rng) for pic, path in pref_test],
        "rl_prompts": [prompt_row(pic, path) for pic, path in train[spec.n_sft :] + train[: spec.n_sft]],
        "eval": [prompt_row(pic, path) for pic, path in evals],
    }
    return splits, pictures
