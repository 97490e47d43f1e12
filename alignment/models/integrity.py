"""A model folder is checked before any weights are read, so damage is one line, not a traceback from
deep inside from_pretrained (or, worse, a model that loads with garbage in it).

- A folder we committed (it has MANIFEST.json) is verified against its manifest: every file's size
  and sha256 (storage.download_dir does this for local folders in place and for store URIs as it
  downloads).
- Any folder's *.safetensors files are checked against their own headers: a file shorter or longer
  than its header says is truncated or damaged; the embedding's rows must match config.json's
  vocab_size (an edited config.json or a mixed-up tokenizer would otherwise fail, or silently index
  past the table, at the first batch).
Reading a safetensors header is a few kilobytes, whatever the model's size.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

from alignment import storage

_EMBEDDINGS = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight")


# (folder, its manifest's mtime) already checked in this process: a run resolves one model several times
# (tokenizer, policy, reference) and a committed folder is never rewritten in place
_checked: set[tuple[str, int]] = set()


class ModelIntegrityError(storage.StorageError):
    """A model folder's files don't match its manifest, their own headers or its config."""


def _header(path: Path) -> tuple[dict, int]:
    """The safetensors header of `path` and the file size it implies."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise ValueError("shorter than a safetensors header")
        (n,) = struct.unpack("<Q", raw)
        if n > min(size - 8, 100 << 20):
            raise ValueError(f"its header claims {n} bytes")
        header = json.loads(f.read(n))
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    return header, 8 + n + end


def check_model_dir(path: Path, flag: str, verified: bool = False) -> None:
    """Raise ModelIntegrityError (one line: the flag, the file, what is wrong, the fix) when the model
    folder at `path` is damaged; see the module docstring. `verified`: its manifest was just checked
    (a store URI's fresh download)."""
    manifest = path / storage.MANIFEST
    key = (str(path.resolve()), manifest.stat().st_mtime_ns if manifest.exists() else 0)
    if key in _checked:
        return
    if not verified and manifest.exists():
        try:
            storage.download_dir(path)  # in place: sizes and hashes against the manifest
        except storage.StorageError as e:
            raise ModelIntegrityError(f"{flag} {path}: {e}") from None
    vocab = _vocab_size(path)
    for file in sorted(path.glob("*.safetensors")):
        try:
            header, expected = _header(file)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ModelIntegrityError(
                f"{flag} {path}: {file.name} is not a readable safetensors file ({e}); "
                f"re-save or re-download the model"
            ) from None
        if file.stat().st_size != expected:
            raise ModelIntegrityError(
                f"{flag} {path}: {file.name} has {file.stat().st_size} bytes but its header "
                f"describes {expected}: the file is truncated or damaged; re-save or "
                f"re-download the model"
            )
        for name, info in header.items():
            if vocab and name.endswith(_EMBEDDINGS) and info["shape"][0] != vocab:
                raise ModelIntegrityError(
                    f"{flag} {path}: {name} has {info['shape'][0]} rows but config.json says "
                    f"vocab_size {vocab}; fix config.json or re-save the model with its "
                    f"tokenizer"
                )
    _checked.add(key)


def _vocab_size(path: Path) -> int | None:
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None  # loading.py names a missing or broken config.json
    vocab = config.get("vocab_size") if isinstance(config, dict) else None
    return vocab if isinstance(vocab, int) else None


# The files from_pretrained reads weights from (transformers' SAFE_WEIGHTS_NAME, WEIGHTS_NAME and their indexes)
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def require_weights(path: Path, flag: str) -> None:
    """A model folder saved without its weights (config and tokenizer only, or a download cut short) is
    named here, before the data is read; from_pretrained would only get to it after tokenizing, and then
    reported it as a hub model it could not fetch."""
    found = [f for f in WEIGHT_FILES if (path / f).is_file()]
    if not found:
        raise ModelIntegrityError(
            f"{flag} {path}: no weights in that directory (none of {', '.join(WEIGHT_FILES)}); save the model "
            f"there with model.save_pretrained(DIR), or point {flag} at the folder that holds them"
        )
    for index in (f for f in found if f.endswith(".index.json")):
        try:
            shards = sorted(set(json.loads((path / index).read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelIntegrityError(
                f"{flag} {path}: {index} is not a weights index ({type(e).__name__}: {e})"
            ) from None
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise ModelIntegrityError(
                f"{flag} {path}: {index} names {len(shards)} weight files but {', '.join(missing[:3])}"
                f"{' ...' if len(missing) > 3 else ''} {'is' if len(missing) == 1 else 'are'} missing; "
                f"copy or download the whole model folder"
            )


def check_finite(model: torch.nn.Module, flag: str, path: str) -> None:
    """Every floating-point weight of a just-loaded model is finite. A damaged model (a diverged run's weights
    saved by another tool, a bad conversion) otherwise fails far from its cause: generation stops in
    torch.multinomial ("probability tensor contains either inf, nan"), training blames --learning_rate.
    One pass over weights already in memory; the first non-finite tensor is named."""

    for name, p in model.named_parameters():
        if p.is_floating_point() and not bool(torch.isfinite(p).all()):
            raise ModelIntegrityError(
                f"{flag} {path}: weight {name} holds NaN/Inf; the model is damaged: re-save or re-download it, "
                f"or pass another model (one trained into NaN: its last finite checkpoint)"
            )
