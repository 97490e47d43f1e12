"""Process-reward data: text whose reasoning steps each end in --placeholder_token, and one label per
placeholder (OpenRLHF's ProcessRewardDataset: {"input": "... step 1 ки step 2 ки", "label": ["+", "-"]}).

A label is a reward token (hard) or a number in [0, 1], the probability the step is good (soft); a
dataset holds one kind. Truncation to --max_len drops the placeholders cut off, and their labels.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import torch
from datasets import Features, List, Value

from alignment.config.base import ConfigError
from alignment.config.stages import PRMConfig
from alignment.datasets.batch import Batch, TokenizedSample
from alignment.datasets.formatting import describe, get_field
from alignment.datasets.sources import DataError
from alignment.losses.prm import IGNORE

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


@dataclass
class PRMSample:
    input_ids: list[int]  # [L]
    targets: list[float]  # [L]: at each placeholder its label (hard: index in R, or a token id; soft: q), else IGNORE

    def as_tokens(self) -> TokenizedSample:
        """SFT's sample with the loss mask on the placeholders, for SFT's collation."""
        return TokenizedSample(self.input_ids, [int(t != IGNORE) for t in self.targets])


@dataclass
class PRMBatch:
    tokens: Batch  # ids, attention and positions as SFT collates them; loss_mask: 1 at placeholders
    targets: torch.Tensor  # [B, T] float, laid out like tokens.input_ids; IGNORE off placeholders

    def to(self, device: str | torch.device) -> "PRMBatch":
        return PRMBatch(self.tokens.to(device), self.targets.to(device))


def layout_targets(samples: list[PRMSample], tokens: Batch) -> torch.Tensor:
    """[B, T] targets in the places SFT's collation put each sample's tokens (padded: a row each;
    packed: found through the segment map and restarting positions)."""
    out = torch.full(tokens.input_ids.shape, IGNORE)
    if not tokens.packed:
        for i, s in enumerate(samples):
            out[i, : len(s.targets)] = torch.tensor(s.targets)
        return out
    seg, pos = tokens.segment_map.cpu(), tokens.position_ids.cpu()
    for r, c in (seg >= 0).nonzero().tolist():
        out[r, c] = samples[int(seg[r, c])].targets[int(pos[r, c])]
    return out


def single_token_id(tok: PreTrainedTokenizerBase, token: str, flag: str) -> int:
    ids = tok.encode(token, add_special_tokens=False)
    if len(ids) != 1:
        raise ConfigError(
            f"{flag} {token!r} is {len(ids)} tokens for this tokenizer ({ids}); it must be one "
            f"token: pick one the tokenizer has whole"
        )
    return ids[0]


class PRMTokenizer:
    """Tokenizes rows per a PRM config (a row tokenizer of alignment.datasets.tokenized)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, cfg: PRMConfig, source: str = "dataset"):
        self.tok, self.cfg, self.source = tokenizer, cfg, source
        self.placeholder_id = single_token_id(tokenizer, cfg.data.placeholder_token, "--placeholder_token")
        self.reward_ids = (
            [single_token_id(tokenizer, t, "--reward_tokens") for t in cfg.data.reward_tokens]
            if cfg.data.reward_tokens
            else None
        )
        self.soft = False  # of the last `finish`

    SETTINGS = ("data.max_len", "data.input_key", "data.label_key", "data.placeholder_token", "data.reward_tokens")

    def settings(self) -> dict[str, Any]:
        return {name: attrgetter(name)(self.cfg) for name in self.SETTINGS}

    def features(self) -> Features:
        return Features(
            {
                "input_ids": List(Value("int32")),
                "targets": List(Value("float32")),
                "soft": Value("bool"),
                "truncated": Value("bool"),
                "keep": Value("bool"),
            }
        )

    def _target(self, label: Any, index: int) -> tuple[float, bool]:
        """(target, soft) of one step's label."""
        where = f"{self.source} row {index}: --label_key {self.cfg.data.label_key!r}"
        if isinstance(label, bool) or not isinstance(label, (str, int, float)):
            raise DataError(f"{where} holds {describe(label)}; expected reward tokens or numbers in [0, 1]")
        if isinstance(label, str):
            if self.reward_ids is None:
                return float(single_token_id(self.tok, label, f"{where} label")), False
            if label not in self.cfg.data.reward_tokens:
                raise DataError(
                    f"{where} label {label!r} is not one of --reward_tokens {' '.join(self.cfg.data.reward_tokens)}"
                )
            return float(self.cfg.data.reward_tokens.index(label)), False
        if not (self.reward_ids and len(self.reward_ids) == 2 and 0.0 <= label <= 1.0):
            raise DataError(
                f"{where} label {label!r}: a soft label is a number in [0, 1] and needs two "
                f"--reward_tokens (the positive one first)"
            )
        return float(label), True

    def columns(self, row: dict, index: int) -> dict[str, Any]:
        text = get_field(row, self.cfg.data.input_key, "--input_key", index, self.source)
        labels = get_field(row, self.cfg.data.label_key, "--label_key", index, self.source)
        if not isinstance(text, str):
            raise DataError(
                f"{self.source} row {index}: --input_key {self.cfg.data.input_key!r} is {describe(text)}; "
                f"expected the text with a {self.cfg.data.placeholder_token!r} after each step"
            )
        if not isinstance(labels, list) or not labels:
            raise DataError(
                f"{self.source} row {index}: --label_key {self.cfg.data.label_key!r} is {describe(labels)}; "
                f"expected a list with one label per {self.cfg.data.placeholder_token!r}"
            )
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        places = [i for i, t in enumerate(ids) if t == self.placeholder_id]
        if len(places) != len(labels):
            raise DataError(
                f"{self.source} row {index}: {len(places)} {self.cfg.data.placeholder_token!r} tokens and "
                f"{len(labels)} labels; each step ends in the placeholder (as its own token) and has "
                f"one label"
            )
        parsed = [self._target(label, index) for label in labels]
        if len({soft for _, soft in parsed}) > 1:
            raise DataError(f"{self.source} row {index}: reward tokens and numbers mixed in one row's labels")
        targets = [IGNORE] * len(ids)
        for i, (target, _) in zip(places, parsed):
            targets[i] = target
        truncated = len(ids) > self.cfg.data.max_len
        ids, targets = ids[: self.cfg.data.max_len], targets[: self.cfg.data.max_len]
        keep = any(t != IGNORE for t in targets)
        return {
            "input_ids": ids if keep else [],
            "targets": targets if keep else [],
            "soft": parsed[0][1],
            "truncated": truncated,
            "keep": keep,
        }

    def finish(self, columns: dict[str, list], n_rows: int) -> list[PRMSample]:
        kept = [i for i, keep in enumerate(columns["keep"]) if keep]
        if not kept:
            raise DataError(
                f"{self.source}: no usable samples in {n_rows} rows: --max_len {self.cfg.data.max_len} cuts "
                f"off every step's placeholder; raise --max_len"
            )
        kinds = {columns["soft"][i] for i in kept}
        if len(kinds) > 1:
            raise DataError(
                f"{self.source}: some rows have reward-token labels and others numbers; a PRM dataset "
                f"holds one kind"
            )
        self.soft = kinds.pop()
        if sum(columns["truncated"]) or len(kept) < n_rows:
            log.warning(
                "%s: %d of %d samples longer than --max_len %d were truncated (their placeholders after it "
                "dropped); %d had no placeholder left and were dropped",
                self.source,
                sum(columns["truncated"]),
                n_rows,
                self.cfg.data.max_len,
                n_rows - len(kept),
            )
        return [PRMSample(columns["input_ids"][i], columns["targets"][i]) for i in kept]
