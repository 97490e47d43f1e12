"""SFT dataset: rows -> token ids with a loss mask; collation padded or packed.

Prompt and response are tokenized separately and concatenated, so the prompt's tokens are
exactly those the model sees at generation time and the loss mask is exact.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import torch

from alignment.config.groups import DataConfig
from alignment.config.vision import VisionDataConfig
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
    loaded_inputs,
    merge_image_inputs,
    processor_of,
    with_image_items,
)
from alignment.datasets.packing import block_causal_mask, first_fit_rows
from alignment.datasets.sources import DataError
from alignment.datasets.tokenized import columns_of

log = logging.getLogger(__name__)


@dataclass
class TokenizedSample:
    input_ids: list[int]  # [L]
    loss_mask: list[int]  # [L], 1 where the token is a training target
    images: list[str] = field(default_factory=list)  # its images' references, in placeholder order


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T]
    loss_mask: torch.Tensor  # [B, T], 1 on target tokens (never the first of a sample)
    attention_mask: torch.Tensor | None  # [B, T] padding mask, or [B, 1, T, T] block mask when packed
    position_ids: torch.Tensor | None  # [B, T]; restart per sample when packed
    num_samples: int
    lengths: list[int]  # tokens of each sample, in order
    segment_map: torch.Tensor | None = None  # packed: [B, T] sample index of each token, -1 on row padding
    # shared-prompt rows (datasets/shared_prompt.py): [K, 3] (row, column, parent) of each token that is
    # predicted by the logits at `parent`, not at column - 1; None: every token follows its left neighbour
    branches: torch.Tensor | None = None
    # a vision-language model's image tensors for the batch's images, in row order (models.vision.image_inputs)
    images: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def packed(self) -> bool:
        return self.position_ids is not None

    def to(self, device: str | torch.device) -> "Batch":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Batch(
            self.input_ids.to(device),
            self.loss_mask.to(device),
            move(self.attention_mask),
            move(self.position_ids),
            self.num_samples,
            self.lengths,
            move(self.segment_map),
            move(self.branches),
            {k: v.to(device) for k, v in self.images.items()},
        )

    def segments(self) -> torch.Tensor | None:
        """[B, T] sample index of each token when packed (row padding: 0, which has no loss-mask
        tokens, so per-sample sums ignore it); None when padded (a sample per row)."""
        return self.segment_map.clamp(min=0) if self.packed else None

    def last_token(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(row, column) of each sample's last token: where a reward model reads its value. [S], [S]."""
        if self.packed:
            t = self.segment_map.shape[1]
            flat = self.segment_map.reshape(-1)
            real = (flat >= 0).nonzero().squeeze(-1)
            last = torch.full((self.num_samples,), -1, dtype=torch.long, device=flat.device)
            last = last.scatter_reduce(0, flat[real], real, reduce="amax")
            return last // t, last % t
        lengths = torch.tensor(self.lengths, device=self.input_ids.device)
        return torch.arange(len(self.lengths), device=lengths.device), lengths - 1


@dataclass
class TokenizeStats:
    kept: int = 0
    truncated: int = 0
    dropped: int = 0  # nothing left to learn after truncation (prompt longer than --max_len)


class SFTTokenizer:
    """Tokenizes rows per the data flags of an SFT config."""

    def __init__(self, tokenizer: Any, cfg: DataConfig, source: str = "dataset"):
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

    def features(self) -> Any:
        from datasets import Features, List, Value

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


def collate_padded(samples: list[TokenizedSample], pad_id: int, processor: Any = None) -> Batch:
    t = max(len(s.input_ids) for s in samples)
    ids = torch.full((len(samples), t), pad_id, dtype=torch.long)
    loss = torch.zeros((len(samples), t), dtype=torch.long)
    attn = torch.zeros((len(samples), t), dtype=torch.long)
    for i, s in enumerate(samples):
        n = len(s.input_ids)
        ids[i, :n] = torch.tensor(s.input_ids)
        loss[i, :n] = torch.tensor(s.loss_mask)
        attn[i, :n] = 1
    batch = Batch(ids, loss, attn, None, len(samples), [len(s.input_ids) for s in samples])
    if any(s.images for s in samples):  # loaded again here: the cache keeps references, not pixels
        batch.images = merge_image_inputs(
            [loaded_inputs(processor, s.images, f"sample {i}") for i, s in enumerate(samples)]
        )
    return batch


def collate_packed(
    samples: list[TokenizedSample], mask_dtype: torch.dtype | None = torch.bool, row_tokens: int | None = None
) -> Batch:
    """The micro-batch's samples packed into rows.

    mask_dtype None: one row [1, sum(L)], no explicit mask, only restarting position ids
    (flash-attention's varlen path). With a mask and `row_tokens`: first-fit rows of at most
    `row_tokens` tokens [R, T], right-padded to the longest row (padding: token 0, loss 0,
    attending only to padding), so attention costs R·T² instead of sum(L)².
    """
    lengths = [len(s.input_ids) for s in samples]
    if mask_dtype is None or row_tokens is None:
        rows = [list(range(len(samples)))]
    else:
        rows = first_fit_rows(lengths, row_tokens)
    width = max(sum(lengths[i] for i in row) for row in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    loss = torch.zeros_like(ids)
    pos = torch.zeros_like(ids)
    seg = torch.full_like(ids, -1)
    for r, row in enumerate(rows):
        col = 0
        for i in row:
            n, s = lengths[i], samples[i]
            ids[r, col : col + n] = torch.tensor(s.input_ids)
            loss[r, col : col + n] = torch.tensor(s.loss_mask)
            pos[r, col : col + n] = torch.arange(n)
            seg[r, col : col + n] = i
            col += n
    mask = None if mask_dtype is None else block_causal_mask(seg, mask_dtype)
    return Batch(ids, loss, mask, pos, len(samples), lengths, seg)
