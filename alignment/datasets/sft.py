"""SFT dataset: rows -> token ids with a loss mask (collated by alignment.datasets.batch).

Prompt and response are tokenized separately and concatenated, so the prompt's tokens are
exactly those the model sees at generation time and the loss mask is exact.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from datasets import Features, List, Value

from alignment.config.groups import DataConfig
from alignment.config.vision import VisionDataConfig
from alignment.datasets.batch import TokenizedSample
from alignment.datasets.formatting import (
    as_messages,
    chat,
    describe,
    get_field,
    get_text,
    is_message,
    prompt_and_response,
    prompt_text,
    require_chat_template,
)
from alignment.datasets.images import (
    RowImages,
    image_refs,
    processor_of,
    with_image_items,
)
from alignment.datasets.sources import DataError
from alignment.datasets.tokenized import columns_of

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


@dataclass
class TokenizeStats:
    kept: int = 0
    truncated: int = 0
    dropped: int = 0  # nothing left to learn after truncation (prompt longer than --max_len)


class SFTTokenizer:
    """Tokenizes rows per the data flags of an SFT config."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, cfg: DataConfig, source: str = "dataset"):
        self.tok, self.cfg, self.source = tokenizer, cfg, source
        self.stats = TokenizeStats()  # of the last `finish`
        # images: the rows' --image_key, through the vision-language model's processor (models.vision)
        self.processor = processor_of(tokenizer) if isinstance(cfg, VisionDataConfig) and cfg.with_images else None
        if cfg.data.apply_chat_template:
            require_chat_template(tokenizer, cfg.model.model_name_or_path)
        if not cfg.model.pretrain_mode_enable and not cfg.data.multiturn and not cfg.data.output_key:
            raise DataError("--output_key is required for SFT (or use --pretrain_mode / --multiturn)")

    def _ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def pieces(self, row: dict, index: int) -> list[tuple[str, bool]]:
        """(text, is_target) pieces of one row, in order."""
        cfg = self.cfg
        if cfg.data.multiturn:
            value = get_field(row, cfg.data.input_key, "--input_key", index, self.source)
            if not (isinstance(value, list) and value and all(is_message(m) for m in value)):
                raise DataError(
                    f"{self.source} row {index}: --input_key {cfg.data.input_key!r} is {describe(value)}, but "
                    f"--multiturn needs a conversation: a list of {{role, content}} messages with "
                    f"assistant turns; point --input_key at one, or drop --multiturn and set --output_key"
                )
            msgs = as_messages(with_image_items(value) if self.processor else value, "user")
            pieces, done = [], ""
            for i, m in enumerate(msgs):
                through = chat(self.tok, msgs[: i + 1], add_generation_prompt=False)
                if m["role"] == "assistant":
                    before = chat(self.tok, msgs[:i], add_generation_prompt=True)
                    pieces.append((before[len(done) :], False))
                    pieces.append((through[len(before) :], True))
                else:
                    pieces.append((through[len(done) :], False))
                done = through
            return [p for p in pieces if p[0]]
        value = get_text(row, cfg.data.input_key, "--input_key", index, self.source)
        response = (
            get_text(row, cfg.data.output_key, "--output_key", index, self.source) if cfg.data.output_key else None
        )
        if self.processor and cfg.data.apply_chat_template:
            value = with_image_items(value)  # OpenRLHF's <image> tags, as the model's template places images
        if response is None:
            return [(prompt_text(self.tok, value, cfg.data.apply_chat_template, cfg.data.input_template), True)]
        prompt, text = prompt_and_response(
            self.tok, value, response, cfg.data.apply_chat_template, cfg.data.input_template
        )
        return [(prompt, cfg.model.pretrain_mode_enable), (text, True)]

    # every config field `columns` reads: part of the tokenization cache key
    SETTINGS = (
        "data.max_len",
        "data.input_key",
        "data.output_key",
        "data.input_template",
        "data.apply_chat_template",
        "data.multiturn",
        "model.pretrain_mode_enable",
    )

    def settings(self) -> dict[str, Any]:
        values = {name: attrgetter(name)(self.cfg) for name in self.SETTINGS}
        if self.processor:  # how images become tokens: part of the cache key
            values["images"] = [self.cfg.data.image_key, self.processor.image_processor.to_json_string()]
        return values

    def features(self) -> Features:
        return Features(
            {
                "input_ids": List(Value("int32")),
                "loss_mask": List(Value("int8")),
                "images": List(Value("string")),
                "truncated": Value("bool"),
                "untaught": Value("bool"),
                "blank": Value("bool"),
                "keep": Value("bool"),
            }
        )

    def _blank(self, row: dict, index: int) -> bool:
        """The row's response (every assistant turn, with --multiturn) is empty or whitespace. Such a sample still
        teaches the end token, so it is kept; a dataset of nothing else is a wrong --output_key (finish)."""
        cfg = self.cfg
        if cfg.data.multiturn:
            msgs = [m for m in as_messages(row.get(cfg.data.input_key), "user") if m["role"] == "assistant"]
        elif cfg.data.output_key:
            msgs = as_messages(get_text(row, cfg.data.output_key, "--output_key", index, self.source), "assistant")
        else:
            return False
        return bool(msgs) and all(m["content"] is None or str(m["content"]).strip() == "" for m in msgs)

    def columns(self, row: dict, index: int) -> dict[str, Any]:
        """One row: its ids and loss mask (empty when dropped) and what happened to it."""
        ids, mask = [], []
        refs = self._image_refs(row, index)
        images = RowImages(self.processor, refs, f"{self.source} row {index}") if self.processor else None
        for text, target in self.pieces(row, index):
            piece = images.ids(self.tok, text) if images else self._ids(text)
            ids += piece
            mask += [int(target)] * len(piece)
        if images:
            images.check_all_used()
        if mask:
            mask[0] = 0  # the first token of a sample has no prediction inside that sample
        untaught = sum(mask) == 0  # nothing to learn even before truncation (e.g. no assistant turn)
        truncated = len(ids) > self.cfg.data.max_len
        if truncated:
            ids, mask = ids[: self.cfg.data.max_len], mask[: self.cfg.data.max_len]
        keep = sum(mask) > 0
        if truncated and refs:  # a cut image would leave its tokens without their pixels
            raise DataError(
                f"{self.source} row {index}: {len(ids)} tokens with its images, over --max_len "
                f"{self.cfg.data.max_len}; a sample with images is never cut: raise --max_len"
            )
        return {
            "input_ids": ids if keep else [],
            "loss_mask": mask if keep else [],
            "images": refs if keep else [],
            "truncated": truncated,
            "untaught": untaught,
            "blank": self._blank(row, index),
            "keep": keep,
        }

    def finish(self, columns: dict[str, list], n_rows: int) -> list[TokenizedSample]:
        """The kept samples, in row order; `self.stats` counts the rest (logged, as is an empty result)."""
        out = [
            TokenizedSample(ids, mask, images)
            for ids, mask, images, keep in zip(
                columns["input_ids"], columns["loss_mask"], columns["images"], columns["keep"]
            )
            if keep
        ]
        self.stats = stats = TokenizeStats(
            kept=len(out), truncated=sum(columns["truncated"]), dropped=n_rows - len(out)
        )
        untaught = sum(columns["untaught"])
        if stats.truncated or stats.dropped:
            log.warning(
                "%s: %d of %d samples longer than --max_len %d were truncated; %d had no response "
                "tokens left and were dropped",
                self.source,
                stats.truncated,
                n_rows,
                self.cfg.data.max_len,
                stats.dropped,
            )
        if n_rows and sum(columns["blank"]) == n_rows:  # it trained on the end token alone and committed
            key = "--input_key" if self.cfg.data.multiturn else "--output_key"
            name = self.cfg.data.input_key if self.cfg.data.multiturn else self.cfg.data.output_key
            what = f"every assistant turn in {key} {name!r} is" if self.cfg.data.multiturn else f"{key} {name!r} is"
            raise DataError(
                f"{self.source}: in all {n_rows} rows {what} empty: nothing to learn but the end token; point "
                f"{key} at the responses or fill them in"
            )
        if not out:
            where = "no assistant turn in --input_key" if self.cfg.data.multiturn else "empty response"
            raise DataError(
                f"{self.source}: no usable samples in {n_rows} rows: {untaught} have nothing to learn "
                f"({where}) and {n_rows - untaught} lose their response to --max_len "
                f"{self.cfg.data.max_len}; raise --max_len or check the keys"
            )
        return out

    def _image_refs(self, row: dict, index: int) -> list[str]:
        if not self.processor:
            return []
        return image_refs(row, self.cfg.data.image_key, self.cfg.data.max_images_per_prompt, index, self.source)

    def __call__(self, rows: list[dict]) -> tuple[list[TokenizedSample], TokenizeStats]:
        """In this process, without the cache (alignment.datasets.tokenized.tokenize is the cached path)."""
        return self.finish(columns_of(self, rows), len(rows)), self.stats
