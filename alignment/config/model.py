"""The model a stage starts from and how it is loaded: path, revision, precision, attention kernel, tokenizer
(OpenRLHF's --model.* / --actor.* model flags and their --ds.* loading knobs)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Optional

from alignment.config.base import opt, require


@dataclass(frozen=True)
class Model:
    """`model` settings; ModelConfig checks them."""

    model_name_or_path: Optional[str] = opt(
        None,
        "HF model directory, store URI (s3://...) or hub name to start from",
        path="model",
        dotted={"": "model.model_name_or_path", "ppo": "actor.model_name_or_path"},
        flat="pretrain",
    )
    trust_remote_code: bool = opt(
        False,
        "Let transformers run the model repo's own Python code (custom architectures); "
        "only for models whose code you trust",
    )
    revision: Optional[str] = opt(
        None,
        "Hub revision of --pretrain (branch, tag or commit sha) to pin; part of the "
        "stage identity, so a flow reruns the stage when it changes",
    )
    flash_attn: bool = opt(
        False,
        "Use flash-attention 2 (--attn_implementation flash_attention_2); falls back to PyTorch SDPA (logged "
        "once) where flash-attn is missing",
    )
    gradient_checkpointing_enable: bool = opt(
        False,
        "Recompute activations in backward to save memory",
        dotted={"": "model.gradient_checkpointing_enable", "ppo": "actor.gradient_checkpointing_enable"},
        flat="gradient_checkpointing",
    )
    gradient_checkpointing_reentrant: bool = opt(
        False,
        "Use the reentrant checkpointing variant",
        dotted={"": "model.gradient_checkpointing_reentrant", "ppo": "actor.gradient_checkpointing_reentrant"},
        flat="gradient_checkpointing_use_reentrant",
    )
    use_ms: bool = opt(
        False,
        "Load models and tokenizers by name from ModelScope's hub instead of Hugging Face's (needs the "
        "modelscope package)",
    )


@dataclass(frozen=True)
class ModelDS:
    """`ds` settings; ModelConfig checks them."""

    bf16: bool = opt(
        False,
        "Train in bfloat16. On CPUs without native bf16 the math runs in fp32 (logged once)",
        dotted="ds.param_dtype",
        dotted_values={"bf16": True},
    )
    attn_implementation: Optional[str] = opt(
        None,
        "The attention kernel: flash_attention_2 (as --flash_attn), sdpa (PyTorch's, the default) or eager "
        "(plain PyTorch ops: what some vision-language models need)",
        choices=("flash_attention_2", "sdpa", "eager"),
        dotted="ds.attn_implementation",
    )
    load_in_4bit: bool = opt(
        False, "QLoRA: load the base in 4 bit (needs bitsandbytes and a CUDA GPU)", dotted="ds.load_in_4bit"
    )
    experts_implementation: Optional[str] = opt(
        None,
        "How a mixture-of-experts model computes its experts (transformers' experts_implementation; unset: "
        "transformers' choice)",
        choices=("eager", "batched_mm", "grouped_mm", "deepgemm"),
        dotted="ds.experts_implementation",
    )
    ring_attn_size: int = opt(
        1,
        "Ring attention: split each sequence across this many GPUs (1: off). Needs CUDA and ring-flash-attn",
        dotted="ds.ring_attn_size",
    )
    ring_attn_head_stride: int = opt(
        1,
        "Ring attention: attention heads processed per communication step",
        dotted="ds.ring_attn_head_stride",
        flat="ring_head_stride",
    )


@dataclass(frozen=True)
class ModelData:
    """`data` settings; ModelConfig checks them."""

    disable_fast_tokenizer: bool = opt(False, "Use the slow (Python) tokenizer", dotted="data.disable_fast_tokenizer")
    tokenizer_chat_template: Optional[str] = opt(
        None, "Jinja chat template overriding the tokenizer's own", dotted="data.tokenizer_chat_template"
    )


class ModelConfig:
    """The checks of `Model` (`model`), `ModelDS` (`ds`), `ModelData` (`data`): a stage's `validate()` runs them, before
    anything loads."""

    def attention(self) -> str:
        """The attention kernel asked for (alignment.models.precision.attn_implementation decides what runs)."""
        return self.ds.attn_implementation or ("flash_attention_2" if self.model.flash_attn else "sdpa")

    def resolve_attention(self) -> None:
        """One spelling per kernel: --attn_implementation flash_attention_2 is --flash_attn, sdpa is the
        default (so the dotted and the flat line parse to one config); only eager stays spelled out."""
        if self.ds.attn_implementation == "eager":
            require(
                not self.model.flash_attn,
                "--flash_attn and --attn_implementation eager ask for two attention kernels: drop one",
            )
        elif self.ds.attn_implementation is not None:
            self.flash_attn = self.ds.attn_implementation == "flash_attention_2"
            self.attn_implementation = None

    def check_modelscope(self) -> None:
        require(
            not self.model.use_ms or importlib.util.find_spec("modelscope") is not None,
            "--use_ms needs the modelscope package (pip install modelscope); or drop it to load from Hugging Face",
        )

    def check_model(self) -> None:
        require(
            bool(self.model.model_name_or_path), "--pretrain is required: pass a model directory, s3:// URI or hub name"
        )
        require(
            not self.model.revision
            or not (
                self.model.model_name_or_path.startswith(("/", ".", "~")) or "://" in self.model.model_name_or_path
            ),
            f"--revision {self.model.revision}: --pretrain {self.model.model_name_or_path} "
            f"is a directory or store URI, not a hub name; "
            f"drop --revision (it pins a Hugging Face hub model)",
        )
        require(
            self.ds.ring_attn_size >= 1, f"--ring_attn_size {self.ds.ring_attn_size}: must be >= 1 (1 turns it off)"
        )
        require(self.ds.ring_attn_head_stride >= 1, f"--ring_head_stride {self.ds.ring_attn_head_stride}: must be >= 1")
        if self.ds.load_in_4bit and hasattr(self.ds, "lora"):  # training: 4-bit weights are frozen, so LoRA
            require(
                self.ds.lora.rank > 0,
                "--load_in_4bit trains LoRA adapters on a frozen 4-bit base (QLoRA): also pass --lora_rank, e.g. 64",
            )
