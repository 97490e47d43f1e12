"""KTO's unpaired rows: a prompt, a response and whether it is desirable; a batch carries each prompt
with another row's response too (KTO's KL reference point)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from datasets import Features, Value

from alignment.config.groups import DataConfig
from alignment.datasets.batch import Batch, TokenizedSample
from alignment.datasets.formatting import get_field, get_text
from alignment.datasets.preference import PreferenceRowTokenizer, collate, ids_features
from alignment.datasets.sources import DataError
from alignment.datasets.tokenized import columns_of

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


@dataclass
class UnpairedSample:
    sample: TokenizedSample  # prompt + response, loss mask on the response
    prompt_ids: list[int]
    response_ids: list[int]
    desirable: bool


@dataclass
class UnpairedBatch:
    batch: Batch  # the N real samples
    mismatched: Batch  # prompt i with response (i + 1) mod N: the KL reference point
    desirable: torch.Tensor  # [N] bool


def parse_label(value: Any, index: int, key: str, source: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise DataError(
        f"{source} row {index}: --label_key {key!r} is {value!r}; KTO needs true (desirable) or false (undesirable)"
    )


class UnpairedTokenizer(PreferenceRowTokenizer):
    """KTO rows: --input_key (prompt), --output_key (response), --label_key (true/false)."""

    SETTINGS = PreferenceRowTokenizer.SETTINGS + ("data.input_key", "data.output_key", "data.label_key")

    def __init__(self, tokenizer: PreTrainedTokenizerBase, cfg: DataConfig, source: str, end_at_eos: bool = False):
        super().__init__(tokenizer, cfg, source, end_at_eos)
        if not cfg.data.output_key:
            raise DataError("--output_key is required for KTO: the JSON key of the response")

    def features(self) -> Features:
        return Features(
            {
                **ids_features("input_ids", "loss_mask", "prompt_ids", "response_ids"),
                "desirable": Value("bool"),
                "keep": Value("bool"),
            }
        )

    def columns(self, row: dict, index: int) -> dict[str, Any]:
        cfg = self.cfg
        prompt = get_text(row, cfg.data.input_key, "--input_key", index, self.source, optional=True)
        response = get_text(row, cfg.data.output_key, "--output_key", index, self.source)
        label = parse_label(
            get_field(row, cfg.data.label_key, "--label_key", index, self.source),
            index,
            cfg.data.label_key,
            self.source,
        )
        p_ids, r_ids = self.split(prompt, response)
        s = self.sample(p_ids, r_ids)
        if s is None:
            return {
                "input_ids": [],
                "loss_mask": [],
                "prompt_ids": [],
                "response_ids": [],
                "desirable": label,
                "keep": False,
            }
        return {
            "input_ids": s.input_ids,
            "loss_mask": s.loss_mask,
            "prompt_ids": p_ids,
            "response_ids": r_ids,
            "desirable": label,
            "keep": True,
        }

    def finish(self, columns: dict[str, list], n_rows: int) -> list[UnpairedSample]:
        out = [
            UnpairedSample(TokenizedSample(ids, mask), p_ids, r_ids, desirable)
            for ids, mask, p_ids, r_ids, desirable, keep in zip(
                columns["input_ids"],
                columns["loss_mask"],
                columns["prompt_ids"],
                columns["response_ids"],
                columns["desirable"],
                columns["keep"],
            )
            if keep
        ]
        self.warn(n_rows, n_rows - len(out), "response")
        if not out:
            raise DataError(
                f"{self.source}: no usable samples in {n_rows} rows (empty, or longer than "
                f"--max_len {self.cfg.data.max_len})"
            )
        kinds = {s.desirable for s in out}
        if len(kinds) == 1:
            log.warning(
                "%s: every sample is %s; KTO learns best from both kinds",
                self.source,
                "desirable" if kinds.pop() else "undesirable",
            )
        return out

    def __call__(self, rows: list[dict]) -> list[UnpairedSample]:
        """In this process, without the cache (alignment.datasets.tokenized.tokenize is the cached path)."""
        return self.finish(columns_of(self, rows), len(rows))


def collate_unpaired(
    items: list[UnpairedSample], packed: bool, pad_id: int, mask_dtype: torch.dtype | None, max_len: int
) -> UnpairedBatch:
    n = len(items)
    mismatched = []
    for i, item in enumerate(items):
        other = items[(i + 1) % n].response_ids
        ids = (item.prompt_ids + other)[:max_len]
        mask = ([0] * len(item.prompt_ids) + [1] * len(other))[:max_len]
        mask[0] = 0
        mismatched.append(TokenizedSample(ids, mask))
    return UnpairedBatch(
        collate([x.sample for x in items], packed, pad_id, mask_dtype, max_len),
        collate(mismatched, packed, pad_id, mask_dtype, max_len),
        torch.tensor([x.desirable for x in items]),
    )
