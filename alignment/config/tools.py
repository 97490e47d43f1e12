"""Configs of the model tools that train nothing: make_tiny_base, import_model and lora_combiner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from alignment.config.base import opt, require
from alignment.config.stages import StageConfig
from alignment.config.tree import group, stage


@dataclass(frozen=True)
class TinyBaseCkpt:
    """The `ckpt` settings only TinyBase has."""

    output_dir: str = opt(
        "./ckpt/tiny_base",
        "Where the model directory goes (local path or s3://)",
        identity=False,
        dotted="ckpt.output_dir",
        flat="save_path",
    )


@dataclass(frozen=True)
class TinyBaseTrain:
    """The `train` settings only TinyBase has."""

    seed: int = opt(0, "Seed of the random initialisation")


@dataclass(frozen=True)
class TinyBaseModel:
    """The `model` settings only TinyBase has."""

    arch: str = opt(
        "llama",
        "llama (the tiny world's model), mixtral (a tiny sparse MoE, for --aux_loss_coef) or llava "
        "(the tiny visual world's model: the tiny Llama behind a CLIP vision tower, data/tiny_vision)",
        choices=("llama", "mixtral", "llava"),
    )


@stage
class TinyBaseConfig(StageConfig):
    """A seeded random-init tiny Llama with the tiny tokenizer (`python -m alignment.cli.make_tiny_base`)."""

    ckpt = group(TinyBaseCkpt)
    train = group(TinyBaseTrain)
    model = group(TinyBaseModel)


@dataclass(frozen=True)
class ImportModelModel:
    """The `model` settings only ImportModel has."""

    source: Optional[str] = opt(
        None,
        "The model to import: a .gguf file, a Hugging Face model folder (local or s3://, "
        "with or without our MANIFEST.json) or a hub name. Also the first positional argument",
    )
    gguf_file: Optional[str] = opt(None, "Which .gguf file of a folder or hub repo holding several to import")
    revision: Optional[str] = opt(None, "Hub revision (branch, tag or commit sha) of a hub-name --source")


@dataclass(frozen=True)
class ImportModelCkpt:
    """The `ckpt` settings only ImportModel has."""

    output_dir: Optional[str] = opt(
        None,
        "Where the committed HF folder goes (local path or s3://)",
        identity=False,
        dotted="ckpt.output_dir",
        flat="save_path",
    )


@stage
class ImportModelConfig(StageConfig):
    """Commit a model made elsewhere as a plain Hugging Face folder in the store
    (`python -m alignment.cli.import_model SRC --save_path URI`)."""

    model = group(ImportModelModel)
    ckpt = group(ImportModelCkpt)

    def check_import(self) -> None:
        require(
            bool(self.model.source),
            "no model to import: pass SRC (a .gguf file, a model folder, s3:// URI or hub name)",
        )
        require(bool(self.ckpt.output_dir), "--save_path is required: where the imported model is committed")
        require(
            not self.model.revision
            or not (self.model.source.startswith(("/", ".", "~")) or "://" in self.model.source),
            f"--revision {self.model.revision}: {self.model.source} is a file, folder or store URI, not a hub name; "
            f"drop --revision",
        )


@dataclass(frozen=True)
class LoraCombinerModel:
    """The `model` settings only LoraCombiner has."""

    model_path: Optional[str] = opt(
        None, "The base model the adapter was trained on: HF directory, store URI or hub name", path="model"
    )
    lora_path: Optional[str] = opt(
        None,
        "The PEFT adapter folder (adapter_config.json + adapter_model.safetensors): "
        "a local folder or a committed store URI",
        path="model",
    )
    is_rm: bool = opt(
        False, "A reward model's adapter: the base loads with its value head (AutoModelForSequenceClassification)"
    )


@dataclass(frozen=True)
class LoraCombinerCkpt:
    """The `ckpt` settings only LoraCombiner has."""

    output_path: Optional[str] = opt(None, "Where the merged model is committed (local path or s3://)", identity=False)


@dataclass(frozen=True)
class LoraCombinerDS:
    """The `ds` settings only LoraCombiner has."""

    bf16: bool = opt(
        False,
        "Load, merge and save in bfloat16 (default: the base's own dtype)",
        dotted="ds.param_dtype",
        dotted_values={"bf16": True},
    )


@stage
class LoraCombinerConfig(StageConfig):
    """Merge a saved LoRA adapter into its base and commit the merged model (OpenRLHF's lora_combiner,
    `python -m alignment.cli.lora_combiner`)."""

    model = group(LoraCombinerModel)
    ckpt = group(LoraCombinerCkpt)
    ds = group(LoraCombinerDS)

    def check_lora_combiner(self) -> None:
        for flag in ("model_path", "lora_path", "output_path"):
            require(
                bool(getattr(self, flag)),
                f"--{flag} is required: python -m alignment.cli.lora_combiner "
                f"--model_path BASE --lora_path ADAPTER --output_path OUT",
            )
