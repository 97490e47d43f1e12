"""Preference pairs (RM, DPO) and unpaired desirable/undesirable samples (KTO) -> token ids.

A pair is (prompt + chosen, prompt + rejected); loss masks mark the response tokens, which is
what DPO sums log-probs over. The RM reads its value at each sequence's last token.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import torch
from datasets import Features, List, Value

from alignment.config.groups import DataConfig
from alignment.config.vision import VisionDataConfig
from alignment.datasets.batch import Batch, TokenizedSample, collate_packed, collate_padded
from alignment.datasets.formatting import end_at_eos, get_field, get_text, prompt_and_response, require_chat_template
from alignment.datasets.images import image_refs, processor_of, prompt_ids, with_image_items
from alignment.datasets.shared_prompt import collate_shared
from alignment.datasets.sources import DataError
from alignment.datasets.tokenized import columns_of

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, ProcessorMixin

log = logging.getLogger(__name__)


@dataclass
class PairSample:
    chosen: TokenizedSample
    rejected: TokenizedSample
    margin: float = 0.0


@dataclass
class PairBatch:
    """Chosen sequences first, then rejected: samples i and i + num_pairs form pair i."""

    batch: Batch
    margins: torch.Tensor  # [N]
    num_pairs: int


class PreferenceRowTokenizer:
    # config fields every row tokenizer here reads (subclasses add theirs): part of the cache key
    SETTINGS: tuple[str, ...] = ("data.max_len", "data.input_template", "data.apply_chat_template")

    def __init__(self, tokenizer: PreTrainedTokenizerBase, cfg: DataConfig, source: str, end_at_eos: bool = False):
        """end_at_eos: responses stop at their EOS (the reward model's data, see `end_at_eos`)."""
        self.tok, self.cfg, self.source, self.end_at_eos = tokenizer, cfg, source, end_at_eos
        if cfg.data.apply_chat_template:
            require_chat_template(tokenizer, cfg.model.model_name_or_path)
        # images (DPO): the rows' --image_key, through the vision-language model's processor (models.vision)
        self.processor = processor_of(tokenizer) if isinstance(cfg, VisionDataConfig) and cfg.with_images else None

    def settings(self) -> dict[str, Any]:
        values = {name: attrgetter(name)(self.cfg) for name in self.SETTINGS}
        if self.processor:  # how images become tokens: part of the cache key
            values["images"] = [self.cfg.data.image_key, self.processor.image_processor.to_json_string()]
        return {"end_at_eos": self.end_at_eos, **values}

    def ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"] if text else []

    def split(
        self, prompt: Any, response: Any, images: list[str] | None = None, where: str = ""
    ) -> tuple[list[int], list[int]]:
        """(prompt ids, response ids); `images`: the row's, whose placeholders the prompt holds (expanded here)."""
        if images and self.cfg.data.apply_chat_template:
            prompt = with_image_items(prompt)  # OpenRLHF's <image> tags, as the model's template places images
        head, text = prompt_and_response(
            self.tok, prompt, response, self.cfg.data.apply_chat_template, self.cfg.data.input_template
        )
        if self.end_at_eos:
            text = end_at_eos(text, self.tok.eos_token)
        head_ids = prompt_ids(self.processor, self.tok, head, images, where) if images else self.ids(head)
        return head_ids, self.ids(text)

    def sample(self, prompt_ids: list[int], response_ids: list[int]) -> TokenizedSample | None:
        """None when --max_len leaves no response token."""
        ids = (prompt_ids + response_ids)[: self.cfg.data.max_len]
        mask = ([0] * len(prompt_ids) + [1] * len(response_ids))[: self.cfg.data.max_len]
        mask[0] = 0  # the first token has nothing before it to be predicted from
        return TokenizedSample(ids, mask) if sum(mask) else None

    def warn(self, n_rows: int, dropped: int, what: str) -> None:
        if dropped:
            log.warning(
                "%s: dropped %d of %d rows whose prompt fills --max_len %d (no %s tokens left); "
                "raise --max_len to keep them",
                self.source,
                dropped,
                n_rows,
                self.cfg.data.max_len,
                what,
            )


def ids_features(*names: str) -> dict[str, Any]:
    return {name: List(Value("int8" if name.endswith("_mask") else "int32")) for name in names}


KEPT, IDENTICAL, TOO_LONG = 0, 1, 2  # PairTokenizer's per-row status column


class PairTokenizer(PreferenceRowTokenizer):
    """Rows with --chosen_key/--rejected_key (and --prompt_key, or chat lists whose last turn is the answer)."""

    SETTINGS = PreferenceRowTokenizer.SETTINGS + ("data.prompt_key", "data.chosen_key", "data.rejected_key")

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        cfg: DataConfig,
        source: str,
        end_at_eos: bool = False,
        use_margin: bool = False,
    ):
        """use_margin: read each row's 'margin' (the RM's --margin_loss)."""
        super().__init__(tokenizer, cfg, source, end_at_eos)
        self.use_margin = use_margin
        self.skipped_identical = 0  # of the last `finish`

    def settings(self) -> dict[str, Any]:
        return {"use_margin": self.use_margin, **super().settings()}

    def features(self) -> Features:
        return Features(
            {
                **ids_features("chosen_ids", "chosen_mask", "rejected_ids", "rejected_mask"),
                "images": List(Value("string")),
                "margin": Value("float64"),
                "status": Value("int8"),
            }
        )

    def _prompt_and_answer(self, value: Any, row: dict, index: int) -> tuple[Any, Any]:
        if self.cfg.data.prompt_key:
            return get_text(row, self.cfg.data.prompt_key, "--prompt_key", index, self.source, optional=True), value
        if isinstance(value, list) and len(value) > 1:  # a whole conversation: the last turn is the answer
            return value[:-1], value[-1]
        return None, value  # plain text: no prompt part

    def columns(self, row: dict, index: int) -> dict[str, Any]:
        cfg = self.cfg
        skipped = {
            "chosen_ids": [],
            "chosen_mask": [],
            "rejected_ids": [],
            "rejected_mask": [],
            "images": [],
            "margin": 0.0,
        }
        chosen = get_text(row, cfg.data.chosen_key, "--chosen_key", index, self.source)
        rejected = get_text(row, cfg.data.rejected_key, "--rejected_key", index, self.source)
        if chosen == rejected:
            return {**skipped, "status": IDENTICAL}  # no preference to learn from; counted, not fatal
        prompt, c_answer = self._prompt_and_answer(chosen, row, index)
        _, r_answer = self._prompt_and_answer(rejected, row, index)
        refs, where = self._image_refs(row, index), f"{self.source} row {index}"
        c_prompt, c_resp = self.split(prompt, c_answer, refs, where)
        r_prompt, r_resp = self.split(prompt, r_answer, refs, where)
        if refs and max(len(c_prompt) + len(c_resp), len(r_prompt) + len(r_resp)) > cfg.data.max_len:
            raise DataError(  # a cut image would leave its tokens without their pixels
                f"{where}: over --max_len {cfg.data.max_len} tokens with its images; a sample with images is never "
                f"cut: raise --max_len"
            )
        c, r = self.sample(c_prompt, c_resp), self.sample(r_prompt, r_resp)
        if c is None or r is None:
            return {**skipped, "status": TOO_LONG}
        margin = 0.0
        if self.use_margin:
            # read outside the try: get_field's DataError is a ValueError, and must stay its own message
            value = get_field(row, "margin", "--margin_loss", index, self.source)
            try:
                margin = float(value)
            except (TypeError, ValueError):
                raise DataError(f"{self.source} row {index}: 'margin' is {value!r}, not a number") from None
        return {
            "chosen_ids": c.input_ids,
            "chosen_mask": c.loss_mask,
            "rejected_ids": r.input_ids,
            "rejected_mask": r.loss_mask,
            "images": refs,
            "margin": margin,
            "status": KEPT,
        }

    def finish(self, columns: dict[str, list], n_rows: int) -> list[PairSample]:
        out = [
            PairSample(TokenizedSample(ci, cm, images), TokenizedSample(ri, rm, images), margin)
            for ci, cm, ri, rm, images, margin, status in zip(
                columns["chosen_ids"],
                columns["chosen_mask"],
                columns["rejected_ids"],
                columns["rejected_mask"],
                columns["images"],
                columns["margin"],
                columns["status"],
            )
            if status == KEPT
        ]
        same, dropped = columns["status"].count(IDENTICAL), columns["status"].count(TOO_LONG)
        if same:
            log.warning(
                "%s: skipped %d of %d pairs whose chosen equals rejected (nothing to prefer)", self.source, same, n_rows
            )
        self.warn(n_rows, dropped, "response")
        self.skipped_identical = same
        if not out:
            raise DataError(
                f"{self.source}: no usable preference pairs in {n_rows} rows "
                f"({same} had chosen == rejected, {dropped} too long for --max_len {self.cfg.data.max_len})"
            )
        return out

    def _image_refs(self, row: dict, index: int) -> list[str]:
        if not self.processor:
            return []
        return image_refs(row, self.cfg.data.image_key, self.cfg.data.max_images_per_prompt, index, self.source)

    def __call__(self, rows: list[dict], use_margin: bool | None = None) -> list[PairSample]:
        """In this process, without the cache (alignment.datasets.tokenized.tokenize is the cached path)."""
        if use_margin is not None:
            self.use_margin = use_margin
        return self.finish(columns_of(self, rows), len(rows))


def collate(
    samples: list[TokenizedSample],
    packed: bool,
    pad_id: int,
    mask_dtype: torch.dtype | None,
    row_tokens: int | None = None,
    processor: ProcessorMixin | None = None,
) -> Batch:
    return collate_packed(samples, mask_dtype, row_tokens) if packed else collate_padded(samples, pad_id, processor)


def collate_pairs(
    pairs: list[PairSample],
    packed: bool,
    pad_id: int,
    mask_dtype: torch.dtype | None,
    row_tokens: int | None = None,
    processor: ProcessorMixin | None = None,
) -> PairBatch:
    """Packed with a dense mask: each pair's prompt once (datasets.shared_prompt); else chosen and rejected
    as two sequences (padded rows, or flash-attention's varlen packing). `processor`: a vision-language
    model's, for the pairs' images (never packed: a config check)."""
    chosen, rejected = [p.chosen for p in pairs], [p.rejected for p in pairs]
    if packed and mask_dtype is not None:
        batch = collate_shared(chosen, rejected, mask_dtype, row_tokens)
    else:
        batch = collate(chosen + rejected, packed, pad_id, mask_dtype, row_tokens, processor)
    return PairBatch(batch, torch.tensor([p.margin for p in pairs]), len(pairs))
