"""RL prompts: rendered and tokenized once per node (through the tokenization cache); over-long
prompts are dropped, counted and reported."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from datasets import Features, List, Value

from alignment.config.distill import OPDConfig
from alignment.config.rollout import RolloutConfig
from alignment.config.vision import VisionDataConfig
from alignment.datasets.formatting import get_field, get_text, prompt_text, require_chat_template
from alignment.datasets.images import PromptImages, image_refs, processor_of, prompt_ids, read_bytes, with_image_items
from alignment.datasets.mixing import blend_rows
from alignment.datasets.sources import DataError
from alignment.datasets.tokenized import image_key, tokenize

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromptSample:
    text: str  # as the policy sees it (chat template / input template applied)
    ids: list[int]  # a vision-language prompt's image placeholders expanded to its images' tokens
    label: Any  # passed to reward_func / reward servers as `labels` (None without --label_key)
    images: tuple[str, ...] = ()  # references of its images (--image_key), in placeholder order
    placeholder_ids: tuple[int, ...] = ()  # with images: its ids before the processor expands them (vLLM's input)

    def engine_images(self) -> PromptImages:
        """Its images as an engine takes them (rollout.types.PromptImages)."""
        return PromptImages(tuple(read_bytes(r) for r in self.images), self.placeholder_ids)


class PromptTokenizer:
    """A row tokenizer (alignment.datasets.tokenized) for RL's --prompt_data / --eval_dataset prompts and
    on-policy distillation's --dataset."""

    # every config field `columns` reads: part of the tokenization cache key
    SETTINGS = (
        "data.input_key",
        "data.label_key",
        "data.input_template",
        "data.apply_chat_template",
        "data.prompt_max_len",
    )

    def __init__(self, tokenizer: PreTrainedTokenizerBase, cfg: "RolloutConfig | OPDConfig", source: str):
        self.tok, self.cfg, self.source = tokenizer, cfg, source
        if cfg.data.apply_chat_template:
            require_chat_template(tokenizer, "--pretrain")
        # images: the rows' --image_key, through the vision-language model's processor (models.vision)
        self.processor = processor_of(tokenizer) if isinstance(cfg, VisionDataConfig) and cfg.with_images else None

    def settings(self) -> dict[str, Any]:
        values = {name: attrgetter(name)(self.cfg) for name in self.SETTINGS}
        if self.processor:  # how images become tokens: part of the cache key
            values["images"] = [self.cfg.data.image_key, self.processor.image_processor.to_json_string()]
        return values

    def features(self) -> Features:
        # the label is any JSON value (a number, a string, a list of tests): one JSON text column
        return Features(
            {
                "text": Value("string"),
                "ids": List(Value("int32")),
                "label": Value("string"),
                "images": List(Value("string")),
                "placeholder_ids": List(Value("int32")),
                "keep": Value("bool"),
            }
        )

    def columns(self, row: dict, index: int) -> dict[str, Any]:
        cfg = self.cfg
        value = get_text(row, cfg.data.input_key, "--input_key", index, self.source)
        if self.processor and cfg.data.apply_chat_template:
            value = with_image_items(value)  # OpenRLHF's <image> tags, as the model's template places images
        text = prompt_text(self.tok, value, cfg.data.apply_chat_template, cfg.data.input_template)
        label = get_field(row, cfg.data.label_key, "--label_key", index, self.source) if cfg.data.label_key else None
        refs: list[str] = []
        text_ids = self.tok(text, add_special_tokens=False)["input_ids"]
        ids = text_ids
        if self.processor:
            refs = image_refs(row, cfg.data.image_key, cfg.data.max_images_per_prompt, index, self.source)
            ids = prompt_ids(self.processor, self.tok, text, refs, f"{self.source} row {index}")
        keep = len(ids) <= cfg.data.prompt_max_len
        return {
            "text": text if keep else "",
            "ids": ids if keep else [],
            "label": json.dumps(label),
            "images": refs if keep else [],
            "placeholder_ids": text_ids if keep and refs else [],
            "keep": keep,
        }

    def finish(self, columns: dict[str, list], n_rows: int) -> list[PromptSample]:
        out = [
            PromptSample(text, ids, json.loads(label), tuple(images), tuple(placeholder))
            for text, ids, label, images, placeholder, keep in zip(
                columns["text"],
                columns["ids"],
                columns["label"],
                columns["images"],
                columns["placeholder_ids"],
                columns["keep"],
            )
            if keep
        ]
        if not out:  # the one error line, without a warning saying the same before it
            raise DataError(
                f"{self.source}: all {n_rows} prompts are longer than --prompt_max_len "
                f"{self.cfg.data.prompt_max_len}; raise --prompt_max_len"
            )
        if dropped := n_rows - len(out):
            log.warning(
                "dropped %d of %d prompts of %s longer than --prompt_max_len %d tokens",
                dropped,
                n_rows,
                self.source,
                self.cfg.data.prompt_max_len,
            )
        return out


def load_prompts(cfg: RolloutConfig, tokenizer: PreTrainedTokenizerBase, spec: str, split: str) -> list[PromptSample]:
    t = PromptTokenizer(tokenizer, cfg, spec)
    main = spec == cfg.data.prompt_dataset
    rows = blend_rows(
        spec,
        cfg.data.prompt_probs if main else None,
        split,
        cfg.data.max_samples,
        cfg.train.seed,
        "--prompt_data" if main else "--eval_dataset",
        image_key(cfg),
    )
    return tokenize(rows, t, cfg.data.dataset_num_proc)
