"""A row's images (--image_key) loaded, counted and placed in its prompt; every failure is one DataError
naming the row and the image. How a row's image values are read is alignment.datasets.image_rows."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import fsspec
import torch

from alignment.datasets.sources import DataError

if TYPE_CHECKING:
    from PIL import Image
    from transformers import PreTrainedTokenizerBase, ProcessorMixin

IMAGE_TAG = "<image>"  # OpenRLHF's placeholder in a string prompt: one per image, where the image goes


@dataclass(frozen=True)
class PromptImages:
    """A vision-language prompt's images for an engine: the encoded files, in placeholder order, and the prompt's
    ids with one placeholder per image as its chat template writes it — what vLLM takes and expands itself (the
    HF engine reads the prompt's ids, expanded by the processor already)."""

    files: tuple[bytes, ...]
    placeholder_ids: tuple[int, ...]  # () where never kept (an agent's context): a vLLM engine derives it


def processor_of(tokenizer: PreTrainedTokenizerBase) -> ProcessorMixin | None:
    """A vision-language model's processor, which its tokenizer carries (alignment.models.vision)."""
    return getattr(tokenizer, "processor", None)


def image_token_id(processor: ProcessorMixin) -> int:
    """The token a vision-language model reads an image at (its processor expands each placeholder to it)."""
    found = getattr(processor, "image_token_id", None)
    return found if found is not None else processor.tokenizer.convert_tokens_to_ids(processor.image_token)


def image_inputs(processor: ProcessorMixin, images: list[Image.Image]) -> dict[str, torch.Tensor]:
    """One sample's image tensors for `images` (PIL, in the order their tokens appear), as the model's processor
    lays them out: LLaVA's pixel_values [N, 3, H, W]; Idefics3's [1, N, 3, H, W] with a pixel mask; Qwen2-VL's
    patches and image_grid_thw. {} for no images."""
    if not images:
        return {}
    return dict(processor.image_processor([images], return_tensors="pt"))  # nested: all one sample's


def loaded_inputs(processor: ProcessorMixin, refs: list[str | bytes], where: str) -> dict[str, torch.Tensor]:
    """`image_inputs` of one sample's images by reference or encoded bytes (loaded as `load_image` does)."""
    return image_inputs(processor, [load_image(r, where) for r in refs])


def merge_image_inputs(parts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Several samples' image tensors as one batch's, in sample order. A layout with a per-sample image axis
    (Idefics3's [1, N, ...]) is zero-padded to the most images, as its processor pads a batch (the model skips
    all-zero images); the others concatenate along their image axis."""
    keys = sorted({k for p in parts for k in p})
    out = {}
    for k in keys:
        got = [p[k] for p in parts if k in p]
        if got[0].dim() >= 4 and got[0].shape[0] == 1 and any(t.shape[1:] != got[0].shape[1:] for t in got):
            most = max(t.shape[1] for t in got)
            got = [torch.nn.functional.pad(t, [0, 0] * (t.dim() - 2) + [0, most - t.shape[1]]) for t in got]
        out[k] = torch.cat(got)
    return out


def placeholder_form(processor: ProcessorMixin, ids: list[int], files: list[bytes], where: str) -> list[int]:
    """`ids` with each image's expansion (the processor's, in order) put back to the one placeholder the chat
    template writes: what vLLM takes (it expands placeholders itself, and expands an expansion again). For a
    context built turn by turn (an agent's episode), where the placeholder form was never kept."""
    tok = processor.tokenizer
    token = getattr(processor, "image_token", IMAGE_TAG)
    placeholder = tok(token, add_special_tokens=False)["input_ids"]
    out, at = [], 0
    for k, f in enumerate(files):
        expansion = processor(text=[token], images=[load_image(f, where)], add_special_tokens=False)["input_ids"][0]
        found = _find(ids, list(expansion), at)
        if found < 0:
            raise ValueError(
                f"{where}: image {k + 1}'s tokens are not in the context in order; pass one image per "
                f"placeholder, in the order of the placeholders"
            )
        out += ids[at:found] + placeholder
        at = found + len(expansion)
    return out + ids[at:]


def _find(seq: list[int], part: list[int], start: int) -> int:
    for i in range(start, len(seq) - len(part) + 1):
        if seq[i : i + len(part)] == part:
            return i
    return -1


def image_refs(row: dict, key: str, most: int, index: int, source: str) -> list[str]:
    """The row's image references (none when the key is absent or empty), at most `most` of them."""
    value = row.get(key)
    if value is None:
        return []
    refs = value if isinstance(value, list) else [value]
    refs = [r for r in refs if r is not None]
    bad = next((r for r in refs if not isinstance(r, str)), None)
    if bad is not None:
        raise DataError(
            f"{source} row {index}: --image_key {key!r} holds a {type(bad).__name__}; an image is a path, a store "
            f"URI, a data URI or bytes"
        )
    if len(refs) > most:
        raise DataError(
            f"{source} row {index}: {len(refs)} images, more than --max_images_per_prompt {most}; raise it or "
            f"drop images from the row"
        )
    return refs


def load_image(ref: str | bytes, where: str) -> Image.Image:
    """The image `ref` names (or is: an encoded file's bytes), decoded as RGB; `where` ("dataset row 3") goes
    into the one-line error."""
    from PIL import Image, UnidentifiedImageError

    shown = f"of {len(ref)} bytes" if isinstance(ref, bytes) else ref if len(ref) < 120 else ref[:60] + "…"
    try:
        data = ref if isinstance(ref, bytes) else read_bytes(ref)
    except (FileNotFoundError, IsADirectoryError):
        raise DataError(
            f"{where}: image {shown} not found (looked from the working directory and beside the data file); "
            f"fix the path in the row"
        ) from None
    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.convert("RGB")
    except (UnidentifiedImageError, OSError) as e:
        raise DataError(f"{where}: image {shown} is not a readable image ({e}); replace the file") from None


def read_bytes(ref: str) -> bytes:
    if ref.startswith("data:"):
        return base64.b64decode(ref.split(",", 1)[1])

    with fsspec.open(ref, "rb") as f:
        return f.read()


def with_image_items(value: Any) -> Any:
    """A prompt whose text holds `<image>` tags as chat messages whose contents are OpenRLHF's lists
    ([{"type": "image"}, {"type": "text", ...}]), the form a vision-language chat template renders its image
    tokens from. Messages without tags are left alone."""
    if isinstance(value, str):
        return [{"role": "user", "content": _content_list(value)}]
    if isinstance(value, list):
        return [
            {**m, "content": _content_list(m["content"])}
            if isinstance(m, dict) and isinstance(m.get("content"), str)
            else m
            for m in value
        ]
    return value


def _content_list(text: str) -> str | list[dict]:
    if IMAGE_TAG not in text:
        return text
    items: list[dict] = []
    for i, part in enumerate(text.split(IMAGE_TAG)):
        if i:
            items.append({"type": "image"})
        if part.strip():
            items.append({"type": "text", "text": part.strip()})
    return items


def prompt_ids(
    processor: ProcessorMixin, tok: PreTrainedTokenizerBase, text: str, refs: list[str], where: str
) -> list[int]:
    """A prompt's ids with its images' placeholders expanded (RowImages), every image placed."""
    images = RowImages(processor, refs, where)
    ids = images.ids(tok, text)
    images.check_all_used()
    return ids


class RowImages:
    """One row's images, handed out in the order their placeholders appear in its pieces of text."""

    def __init__(self, processor: ProcessorMixin, refs: list[str], where: str):
        self.processor, self.refs, self.where, self.used = processor, refs, where, 0
        self.token = getattr(processor, "image_token", IMAGE_TAG)

    def ids(self, tok: PreTrainedTokenizerBase, text: str) -> list[int]:
        """`text`'s token ids, each image placeholder expanded to its image's tokens by the processor."""
        n = text.count(self.token)
        if not n:
            return tok(text, add_special_tokens=False)["input_ids"]
        refs = self.refs[self.used : self.used + n]
        self.used += n
        if len(refs) < n:
            raise DataError(
                f"{self.where}: the prompt has more image placeholders ({self.token}) than the row has images "
                f"({len(self.refs)}); give one image per placeholder"
            )
        images = [load_image(r, self.where) for r in refs]
        return self.processor(text=[text], images=images, add_special_tokens=False)["input_ids"][0]

    def check_all_used(self) -> None:
        if self.used != len(self.refs):
            raise DataError(
                f"{self.where}: {len(self.refs)} images but {self.used} image placeholders in the prompt; put one "
                f"{IMAGE_TAG} in the text where each image goes"
            )
