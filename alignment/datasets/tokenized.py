"""Tokenization through 🤗 datasets: `Dataset.map(num_proc=N)` into an Arrow file per node, found
again by a retry of the stage.

The cache file is `<cache dir>/<fingerprint>.arrow` (with num_proc > 1, one file per shard:
`<fingerprint>_00000_of_00002.arrow` ...). The fingerprint hashes everything the output depends
on: the rows (content and order), the tokenizer (whole vocabulary/model, chat template,
special tokens; not its path), every config field the row tokenizer reads, its class, the source of the code
that tokenizes and the library versions. A changed input of any kind is a new file, never a stale
hit. The cache dir is `$ALIGNFLOW_TOKENIZED_CACHE`, else `alignflow-tokenized/` under
`datasets.config.HF_DATASETS_CACHE`: a local directory, so one per node.

A row tokenizer (SFTTokenizer, PairTokenizer, UnpairedTokenizer, PromptTokenizer) has
`tok`, `source`, `settings()` (the config values it reads), `features()` (the Arrow columns),
`columns(row, index)` (one row's columns; raises DataError for a bad row) and
`finish(columns, n_rows)` (the per-sample dataclasses, statistics and warnings).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

import datasets
import datasets.config
import pyarrow.compute as pc
import tokenizers
import torch.distributed as dist
import transformers

from alignment.config.groups import DataConfig
from alignment.config.stages import StageConfig
from alignment.config.vision import VisionDataConfig
from alignment.datasets import formatting
from alignment.datasets.mixing import Rows, blend_rows
from alignment.datasets.sources import DataError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

CACHE_ENV = "ALIGNFLOW_TOKENIZED_CACHE"
# The cache's column layout. The code's own source is hashed too (code_digest), so an edit to a
# tokenizer needs no bump; bump this when the meaning of the columns changes some other way.
CODE_VERSION = 1
SMALL_DATA_ROWS = 10_000  # below this, --dataset_num_proc 0 (auto) tokenizes in-process
MAX_AUTO_PROCS = 8


class RowTokenizer(Protocol):
    tok: PreTrainedTokenizerBase
    source: str

    def settings(self) -> dict[str, Any]: ...
    def features(self) -> datasets.Features: ...
    def columns(self, row: dict, index: int) -> dict[str, Any]: ...
    def finish(self, columns: dict[str, list], n_rows: int) -> list: ...


def columns_of(t: RowTokenizer, rows: list[dict]) -> dict[str, list]:
    """`t.columns` over rows in this process, as Arrow would give them back: a list per column."""
    out: dict[str, list] = {name: [] for name in t.features()}
    for index, row in enumerate(rows):
        for name, value in t.columns(row, index).items():
            out[name].append(value)
    return out


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path(datasets.config.HF_DATASETS_CACHE) / "alignflow-tokenized")


def auto_num_proc(setting: int, n_rows: int) -> int:
    """--dataset_num_proc: > 0 as given; 0: 1 below SMALL_DATA_ROWS rows (starting workers and
    pickling the tokenizer to them costs more than it saves), else min(8, cores of this process)."""
    if setting > 0:
        n = setting
    elif n_rows < SMALL_DATA_ROWS:
        n = 1
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        n = min(MAX_AUTO_PROCS, cores)
    return max(1, min(n, n_rows))  # datasets would cap it too, with a warning on stderr


def tokenizer_digest(tok: PreTrainedTokenizerBase) -> str:
    """The tokenizer as it tokenizes: a fast tokenizer's whole serialised model (vocab, merges,
    normalizer, post-processor, added tokens), else its vocabulary; the chat template, special tokens and
    padding/truncation settings either way. Not where it was loaded from: each stage's model folder holds a
    copy of its parent's tokenizer, and the same tokenizer found at another path is the same cache entry."""
    backend = getattr(tok, "backend_tokenizer", None)
    parts = {
        "class": type(tok).__qualname__,
        "sides": [getattr(tok, "padding_side", None), getattr(tok, "truncation_side", None)],
        "model_max_length": getattr(tok, "model_max_length", None),
        "model": backend.to_str() if backend is not None else sorted(tok.get_vocab().items()),
        "chat_template": getattr(tok, "chat_template", None),
        "special": {k: str(v) for k, v in (getattr(tok, "special_tokens_map", None) or {}).items()},
        "added": {str(k): str(v) for k, v in (getattr(tok, "added_tokens_decoder", None) or {}).items()},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def code_digest(t: RowTokenizer) -> str:
    """The source of the row tokenizer's module, the formatting helpers and this module."""
    h = hashlib.sha256()
    for module in sorted({inspect.getsourcefile(type(t)), inspect.getsourcefile(formatting), __file__}):
        h.update(Path(module).read_bytes())
    return h.hexdigest()


def fingerprint(rows: Rows, t: RowTokenizer) -> str:
    versions = {
        "datasets": datasets.__version__,
        "tokenizers": tokenizers.__version__,
        "transformers": transformers.__version__,
    }
    blob = {
        "version": CODE_VERSION,
        "code": code_digest(t),
        "libs": versions,
        "kind": f"{type(t).__module__}.{type(t).__qualname__}",
        "settings": t.settings(),
        "tokenizer": tokenizer_digest(t.tok),
        "rows": rows.digest(),
    }
    # 32 hex digits: datasets appends a shard suffix and refuses fingerprints over 64 characters
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:32]


@contextlib.contextmanager
def node_main_first() -> Iterator[None]:
    """The main-process-first pattern: with torch.distributed up, local rank 0 runs the body (and
    writes the cache) while the node's other ranks wait at a barrier, then they run it and find
    the cache. Rank 0 reaches its barrier even when the body raises, so nobody hangs: the others
    then fail the same way themselves (a bad row is bad on every rank)."""

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        yield
        return
    first = int(os.environ.get("LOCAL_RANK", "0")) == 0
    if not first:
        dist.barrier()
    try:
        yield
    finally:
        if first:
            dist.barrier()


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """A bad row must leave one `error:` line on stderr (the CLI contract), not a progress bar
    before it; the summary line logged after tokenization replaces the bar."""

    was = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was:
            datasets.enable_progress_bars()


ERROR_COLUMN = "_error"


def _map_row(example: dict, index: int, tokenizer: RowTokenizer) -> dict[str, Any]:
    """Module level (not a lambda) so datasets can send it to its worker processes. A bad row's
    DataError becomes its `_error` text (other columns empty) instead of an exception: an
    exception leaving a worker goes through `Pool.terminate()`, which once hung CI for 15 minutes
    (datasets 5.2, multiprocess 0.70); a row of text ends the pool the normal way (close, join)."""
    try:
        return {**tokenizer.columns(json.loads(example["row"]), index), ERROR_COLUMN: None}
    except DataError as e:
        return {**{name: None for name in tokenizer.features()}, ERROR_COLUMN: str(e)}


def _first_error(mapped: datasets.Dataset) -> str | None:
    """The lowest-index row's error: the shards come back concatenated in row order."""

    errors = pc.drop_null(mapped.data.column(ERROR_COLUMN))
    return errors[0].as_py() if len(errors) else None


def _remove(path: Path) -> None:
    for p in [path, *path.parent.glob(f"{path.stem}_*_of_*{path.suffix}")]:
        p.unlink(missing_ok=True)


def _cached(path: Path) -> bool:
    return path.exists() or any(path.parent.glob(f"{path.stem}_*_of_*{path.suffix}"))


def tokenize(rows: Rows, t: RowTokenizer, num_proc: int = 0) -> list:
    """`t.finish` of the tokenized rows: from this node's cache when it holds them, else tokenized
    by `Dataset.map` (num_proc per `auto_num_proc`) into it. The first bad row (lowest index, from
    whichever process tokenized it) is raised here as its DataError, so the CLI prints its one line;
    the rows of a dataset with a bad row are not kept in the cache."""

    fp = fingerprint(rows, t)
    path = cache_dir() / f"{fp}.arrow"
    procs = auto_num_proc(num_proc, len(rows))
    start = time.monotonic()
    with node_main_first():
        hit = _cached(path)
        with _no_progress_bars():
            mapped = datasets.Dataset.from_dict({"row": rows.lines}).map(
                _map_row,
                with_indices=True,
                fn_kwargs={"tokenizer": t},
                remove_columns=["row"],
                features=datasets.Features({**t.features(), ERROR_COLUMN: datasets.Value("string")}),
                num_proc=procs if procs > 1 else None,  # 1 would still start a pool
                cache_file_name=str(path),
                load_from_cache_file=True,
                new_fingerprint=fp,
            )
            error = _first_error(mapped)
            if error is not None:
                del mapped  # its memory-mapped files, before they are removed
                _remove(path)
                raise DataError(error)
    # finish first: a dataset it refuses (nothing to learn) is its one error line, without this log line before it
    samples = t.finish(mapped.remove_columns(ERROR_COLUMN).to_dict(), len(rows))
    how = "tokenized before, read from" if hit else f"tokenized (num_proc={procs}) into"
    log.info(
        "%s: %d rows %s %s (%.1fs)", t.source, len(rows), how, path.with_name(f"{fp}*.arrow"), time.monotonic() - start
    )
    return samples


def image_key(cfg: StageConfig) -> str | None:
    """The column of the rows' images, for a stage given images (--max_images_per_prompt > 0)."""
    return cfg.data.image_key if isinstance(cfg, VisionDataConfig) and cfg.with_images else None


def load_train_eval(cfg: DataConfig, make: Callable[[str], RowTokenizer]) -> tuple[list, list | None]:
    """Blend --dataset (and --eval_dataset when given) and tokenize each with `make(source)`: the
    samples every stage trains on. Both are read before either is tokenized, so a missing eval
    file fails first."""
    key = image_key(cfg)
    train_rows = blend_rows(
        cfg.data.dataset,
        cfg.data.dataset_probs,
        cfg.data.dataset_split,
        cfg.data.max_samples,
        cfg.train.seed,
        image_key=key,
    )
    eval_rows = (
        blend_rows(cfg.eval.dataset, None, cfg.eval.split, cfg.data.max_samples, cfg.train.seed, "--eval_dataset", key)
        if cfg.eval.dataset
        else None
    )
    train = tokenize(train_rows, make(cfg.data.dataset), cfg.data.dataset_num_proc)
    if eval_rows is None:
        return train, None
    return train, tokenize(eval_rows, make(cfg.eval.dataset), cfg.data.dataset_num_proc)
