"""Mix comma-separated datasets as OpenRLHF's blending_datasets does: `datasets.interleave_datasets`
by probability (seeded, "all_exhausted"), then the first --max_samples rows.

Rows travel as JSON text, one string per row (`Rows.lines`), through interleaving and
tokenization. Arrow wants one type per column, but our files may hold a field that is a string
in one row and a list of messages in the next, and two mixed datasets rarely share columns at
all: schema inference would fail (or silently coerce) before our per-row checks could name the
bad row. A single string column always has one schema; each map call parses its row back.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import datasets

from alignment.datasets.sources import read_rows


def to_line(row: dict) -> str:
    """One row as JSON text. Values JSON has no type for (bytes, timestamps of a parquet column)
    become their str(): no prompt, response or label check accepts them as they are anyway."""
    return json.dumps(row, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class Rows:
    """The mixed rows of one dataset flag, in order, as JSON text (see the module docstring)."""

    lines: list[str]

    def __len__(self) -> int:
        return len(self.lines)

    def dicts(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines]

    def digest(self) -> str:
        """sha256 of the rows' content and order: a tokenization cache key."""
        h = hashlib.sha256()
        for line in self.lines:
            h.update(line.encode())
            h.update(b"\n")  # JSON text has no raw newline, so rows can't run into each other
        return h.hexdigest()


def weights(probs: str | None, n: int) -> list[float]:
    """--*_probs as numbers; equal when not given (config checks made them >= 0, one per dataset)."""
    return [float(p) for p in probs.split(",")] if probs else [1.0] * n


def blend_rows(
    specs: str,
    probs: str | None,
    split: str,
    max_samples: int,
    seed: int,
    flag: str = "--dataset",
    image_key: str | None = None,
) -> Rows:
    """Every comma-separated dataset is read (so a bad one is reported even at probability 0),
    then interleaved. One dataset: its first `max_samples` rows, in file order. `image_key`: see read_rows."""
    names = [s for s in specs.split(",") if s.strip()]
    parts = [[to_line(r) for r in read_rows(s, split, flag, image_key)] for s in names]
    if len(parts) == 1:
        return Rows(parts[0][:max_samples])

    # A dataset of probability 0 is never drawn: "all_exhausted" could never finish it, and
    # interleave_datasets refuses it, so it is left out (check_mixing ensures one p > 0 remains).
    kept = [(lines, p) for lines, p in zip(parts, weights(probs, len(parts))) if p > 0]
    total = sum(p for _, p in kept)  # interleave_datasets wants probabilities that sum to 1
    mixed = datasets.interleave_datasets(
        [datasets.Dataset.from_dict({"row": lines}) for lines, _ in kept],
        probabilities=[p / total for _, p in kept],
        seed=seed,
        stopping_strategy="all_exhausted",
    )
    mixed = mixed.select(range(min(max_samples, len(mixed))))
    return Rows(list(mixed["row"]))


def blend(
    specs: str,
    probs: str | None,
    split: str,
    max_samples: int,
    seed: int,
    flag: str = "--dataset",
    image_key: str | None = None,
) -> list[dict[str, Any]]:
    """`blend_rows` as dicts: for callers that read rows without tokenizing them through the cache."""
    return blend_rows(specs, probs, split, max_samples, seed, flag, image_key).dicts()
