"""Resolve --pretrain (local dir, store URI, hub name), load tokenizer and causal LM, save HF format."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from huggingface_hub import snapshot_download
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RevisionNotFoundError
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer, BitsAndBytesConfig

from alignment import storage
from alignment.errors import UserError
from alignment.models.chat_template import check_chat_template
from alignment.models.integrity import check_finite, check_model_dir, require_weights
from alignment.models.kind import is_vision_model
from alignment.models.lora import merge_adapter
from alignment.models.vision import attach_processor

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from transformers.models.auto.auto_factory import _BaseAutoModelClass

log = logging.getLogger(__name__)


class ModelLoadError(UserError, ValueError):
    """--pretrain (or another model path) can't be used; the message says why and what to pass."""


def _looks_like_path(name: str) -> bool:
    return name.startswith(("/", ".", "~")) or os.sep * 2 in name or name.count("/") > 1 or os.path.exists(name)


def resolve_model_path(name: str, flag: str = "--pretrain", revision: str | None = None) -> str:
    """A local directory for `name`: downloads committed store URIs; hub names pass through, or, with a
    `revision` (branch, tag or commit), become the local snapshot of exactly that revision, so every
    later load (tokenizer, model, reference, config) reads the same files."""
    if revision:
        if storage.is_remote(name) or _looks_like_path(name):
            raise ModelLoadError(
                f"--revision {revision}: {flag} {name} is a directory or store URI, not a hub name; "
                f"drop --revision (it pins a Hugging Face hub model)"
            )
        return _hub_snapshot(name, revision, flag)
    if storage.is_remote(name) or name.startswith("file://"):
        if not storage.is_committed(name):
            raise ModelLoadError(
                f"{flag} {name}: no committed model there (no MANIFEST.json); point it at a finished stage's output"
            )
        local = storage.download_dir(name)  # verified against its manifest as it downloads
        check_model_dir(local, flag, verified=True)
        return merged_adapter(local, flag) if is_adapter_dir(local) else str(local)
    if _looks_like_path(name):
        path = Path(name).expanduser()
        if path.exists() and not path.is_dir():
            hint = (
                f"; import it first: python -m alignment.cli.import_model {name} --save_path DIR"
                if name.endswith(".gguf")
                else ""
            )
            raise ModelLoadError(
                f"{flag} {name}: is a file; {flag} takes a model directory (with config.json), "
                f"a store URI or a hub name{hint}"
            )
        if not path.is_dir():
            raise ModelLoadError(
                f"{flag} {name}: directory does not exist; pass a model directory (with config.json) or a hub name"
            )
        if is_adapter_dir(path):
            return merged_adapter(path, flag)
        if not (path / "config.json").exists():
            raise ModelLoadError(f"{flag} {name}: no config.json in that directory; is it a Hugging Face model?")
        require_weights(path, flag)
        check_model_dir(path, flag)
        return str(path)
    return name  # a hub name: from_pretrained is the real path for users who have the hub


def is_adapter_dir(path: Path) -> bool:
    """A LoRA stage's output saved without --merge_lora: a PEFT adapter folder, no config.json."""
    return (path / "adapter_config.json").exists() and not (path / "config.json").exists()


def merged_adapter(path: Path, flag: str) -> str:
    """A plain model folder for a PEFT adapter folder: its base (adapter_config.json's
    base_model_name_or_path, resolved like --pretrain, so a store URI or another adapter works) with
    the adapter merged in, and the adapter folder's tokenizer (the stage that trained it may have
    set its chat template). Built once per node into $ALIGNFLOW_CACHE/merged/<hash of the adapter>;
    PEFT's merge_and_unload folds each adapter into its base weight in place, so building it holds
    one copy of the model. Ranks racing on one node: the first rename wins, the others use it."""

    adapter = json.loads((path / "adapter_config.json").read_text())
    if adapter.get("task_type") not in (None, "CAUSAL_LM"):
        raise ModelLoadError(
            f"{flag} {path}: a {adapter.get('task_type')} LoRA adapter; only causal-LM adapters "
            f"load here: pass the stage's merged model (trained with --merge_lora)"
        )
    if not adapter.get("base_model_name_or_path"):
        raise ModelLoadError(
            f"{flag} {path}: adapter_config.json names no base model; set its "
            f"base_model_name_or_path to the model the adapter was trained from"
        )
    digest = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        digest.update((path / name).read_bytes())
    dest = (
        Path(os.environ.get("ALIGNFLOW_CACHE") or Path.home() / ".cache" / "alignflow")
        / "merged"
        / digest.hexdigest()[:24]
    )
    if (dest / "config.json").exists():
        return str(dest)
    base = resolve_model_path(adapter["base_model_name_or_path"], f"{flag} (the base in {path}/adapter_config.json)")
    merged = merge_adapter(AutoModelForCausalLM.from_pretrained(base, dtype="auto"), str(path))
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    merged.save_pretrained(tmp, safe_serialization=True)
    AutoTokenizer.from_pretrained(str(path)).save_pretrained(tmp)
    log.info("%s %s: a LoRA adapter on %s; merged once into %s", flag, path, adapter["base_model_name_or_path"], dest)
    try:
        tmp.rename(dest)
    except OSError:
        if not (dest / "config.json").exists():
            raise
        shutil.rmtree(tmp)  # another rank of this node merged it first
    return str(dest)


def _hub_snapshot(name: str, revision: str, flag: str) -> str:
    try:
        return snapshot_download(name, revision=revision)
    except RevisionNotFoundError as e:
        raise ModelLoadError(
            f"--revision {revision}: {name} has no such branch, tag or commit; pass one listed on its hub page"
        ) from e
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as e:
        raise _hub_error(f"{name}@{revision}", flag, e) from e


def _hub_error(name: str, flag: str, e: Exception) -> ModelLoadError:
    offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("TRANSFORMERS_OFFLINE") == "1"
    why = "the hub is offline (HF_HUB_OFFLINE=1)" if offline else f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return ModelLoadError(
        f"{flag} {name!r}: not a local directory and could not be fetched from the Hugging Face "
        f"hub ({why}); pass a local model path instead"
    )


# Any one of these in a model directory means a tokenizer was saved there (tokenizer_config.json covers
# the exotic kinds); a folder with none of them is a common mistake: weights saved without tokenizer.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
)


def has_tokenizer(path: str | Path) -> bool:
    """A local model folder with a tokenizer saved in it."""
    return Path(path).is_dir() and any((Path(path) / f).exists() for f in TOKENIZER_FILES)


def load_tokenizer(
    path: str,
    chat_template: str | None = None,
    use_fast: bool = True,
    flag: str = "--pretrain",
    trust_remote_code: bool = False,
) -> PreTrainedTokenizerBase:
    local = Path(path).is_dir()
    if local and not has_tokenizer(path):
        raise ModelLoadError(
            f"{flag} {path}: no tokenizer in that directory (none of {', '.join(TOKENIZER_FILES)}); "
            f"save the tokenizer next to the weights (tokenizer.save_pretrained(DIR))"
        )
    try:
        tok: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(
            path, use_fast=use_fast, trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError, TypeError) as e:
        if isinstance(e, ValueError) and "trust_remote_code" in str(e):
            raise _remote_code_error(path, flag, e) from e
        if local:  # not the hub's fault: the files there are incomplete or of a kind this install can't read
            why = " ".join(str(e).split())[:200]
            raise ModelLoadError(
                f"{flag} {path}: the tokenizer in that directory does not load ({type(e).__name__}: "
                f"{why}); re-save it with tokenizer.save_pretrained(DIR)"
            ) from e
        if not isinstance(e, OSError):
            raise
        raise _hub_error(path, flag, e) from e
    if chat_template:
        tok.chat_template = chat_template
    check_chat_template(tok, path, flag, given=bool(chat_template))  # a syntax error: one line, before the data
    if is_vision_model(path):
        tok = attach_processor(path, tok, flag, trust_remote_code)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token  # batching needs one; eos is the common choice
    return tok


def use_modelscope_hub(use_ms: bool) -> None:
    """--use_ms: ModelScope's hub answers the model and tokenizer names loaded after this (its package was
    checked importable with the flags)."""
    if use_ms:
        from modelscope.utils.hf_util import patch_hub

        patch_hub()


def load_causal_lm(
    path: str,
    dtype: torch.dtype,
    attn: str,
    flag: str = "--pretrain",
    load_in_4bit: bool = False,
    trust_remote_code: bool = False,
) -> torch.nn.Module:
    # a vision-language model generates text too, but only its own class reads the images
    auto = AutoModelForImageTextToText if is_vision_model(path) else AutoModelForCausalLM
    return from_pretrained(auto, path, dtype, attn, flag, load_in_4bit, trust_remote_code)


def from_pretrained(
    auto_class: type[_BaseAutoModelClass],
    path: str,
    dtype: torch.dtype,
    attn: str,
    flag: str,
    load_in_4bit: bool,
    trust_remote_code: bool,
    **kwargs: Any,
) -> torch.nn.Module:
    """`auto_class.from_pretrained` with the loaders' options; a missing model or one needing remote code is
    a one-line error naming `flag`."""
    try:
        model = auto_class.from_pretrained(
            path,
            dtype=dtype,
            attn_implementation=attn,
            trust_remote_code=trust_remote_code,
            **quantization_kwargs(load_in_4bit, dtype),
            **kwargs,
        )
    except OSError as e:
        raise _hub_error(path, flag, e) from e
    except ValueError as e:
        raise _remote_code_error(path, flag, e) from e
    check_finite(model, flag, path)
    return model


def _remote_code_error(path: str, flag: str, e: ValueError) -> Exception:
    """transformers refuses a model that ships its own code unless told to trust it: say so in one line."""
    if "trust_remote_code" in str(e):
        return ModelLoadError(
            f"{flag} {path}: the model ships its own Python code (a custom architecture); "
            f"pass --trust_remote_code if you trust that code"
        )
    return e


def quantization_kwargs(load_in_4bit: bool, dtype: torch.dtype) -> dict[str, Any]:
    """QLoRA: nf4 weights, compute in the training dtype (check_4bit ran first)."""
    if not load_in_4bit:
        return {}

    return {
        "quantization_config": BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=dtype
        )
    }


def check_4bit(load_in_4bit: bool, device: str) -> None:
    if not load_in_4bit:
        return

    if device != "cuda" or importlib.util.find_spec("bitsandbytes") is None:
        raise ModelLoadError(
            "--load_in_4bit needs a CUDA GPU and the bitsandbytes package; neither is usable "
            "here: drop --load_in_4bit (use --lora_rank alone for LoRA on CPU)"
        )
