"""Flag groups shared by the stages: the model, LoRA, the data. Names are OpenRLHF's flat flag names
(how a run runs — ranks, optimizer, checkpoints, logging — is in config/runs.py).

Each group checks its own values in `check_<group>()`; a stage's `validate()` runs them all,
before any model or dataset is loaded.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from typing import ClassVar, Optional

from alignment.config.base import ConfigError, opt, require


@dataclass
class ModelConfig:
    own_group: ClassVar[str] = "model"

    pretrain: Optional[str] = opt(
        None,
        "HF model directory, store URI (s3://...) or hub name to start from",
        path="model",
        dotted={"": "model.model_name_or_path", "ppo": "actor.model_name_or_path"},
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
    bf16: bool = opt(
        False,
        "Train in bfloat16. On CPUs without native bf16 the math runs in fp32 (logged once)",
        dotted="ds.param_dtype",
        dotted_values={"bf16": True},
    )
    flash_attn: bool = opt(
        False,
        "Use flash-attention 2 (--attn_implementation flash_attention_2); falls back to PyTorch SDPA (logged "
        "once) where flash-attn is missing",
    )
    attn_implementation: Optional[str] = opt(
        None,
        "The attention kernel: flash_attention_2 (as --flash_attn), sdpa (PyTorch's, the default) or eager "
        "(plain PyTorch ops: what some vision-language models need)",
        choices=("flash_attention_2", "sdpa", "eager"),
        dotted="ds.attn_implementation",
    )
    gradient_checkpointing: bool = opt(
        False,
        "Recompute activations in backward to save memory",
        dotted={"": "model.gradient_checkpointing_enable", "ppo": "actor.gradient_checkpointing_enable"},
    )
    gradient_checkpointing_use_reentrant: bool = opt(
        False,
        "Use the reentrant checkpointing variant",
        dotted={"": "model.gradient_checkpointing_reentrant", "ppo": "actor.gradient_checkpointing_reentrant"},
    )
    load_in_4bit: bool = opt(
        False, "QLoRA: load the base in 4 bit (needs bitsandbytes and a CUDA GPU)", dotted="ds.load_in_4bit"
    )
    disable_fast_tokenizer: bool = opt(False, "Use the slow (Python) tokenizer", dotted="data.disable_fast_tokenizer")
    tokenizer_chat_template: Optional[str] = opt(
        None, "Jinja chat template overriding the tokenizer's own", dotted="data.tokenizer_chat_template"
    )
    experts_implementation: Optional[str] = opt(
        None,
        "How a mixture-of-experts model computes its experts (transformers' experts_implementation; unset: "
        "transformers' choice)",
        choices=("eager", "batched_mm", "grouped_mm", "deepgemm"),
        dotted="ds.experts_implementation",
    )
    use_ms: bool = opt(
        False,
        "Load models and tokenizers by name from ModelScope's hub instead of Hugging Face's (needs the "
        "modelscope package)",
        group="model",
    )
    ring_attn_size: int = opt(
        1,
        "Ring attention: split each sequence across this many GPUs (1: off). Needs CUDA and ring-flash-attn",
        dotted="ds.ring_attn_size",
    )
    ring_head_stride: int = opt(
        1, "Ring attention: attention heads processed per communication step", dotted="ds.ring_attn_head_stride"
    )

    def attention(self) -> str:
        """The attention kernel asked for (alignment.models.precision.attn_implementation decides what runs)."""
        return self.attn_implementation or ("flash_attention_2" if self.flash_attn else "sdpa")

    def resolve_attention(self) -> None:
        """One spelling per kernel: --attn_implementation flash_attention_2 is --flash_attn, sdpa is the
        default (so the dotted and the flat line parse to one config); only eager stays spelled out."""
        if self.attn_implementation == "eager":
            require(
                not self.flash_attn,
                "--flash_attn and --attn_implementation eager ask for two attention kernels: drop one",
            )
        elif self.attn_implementation is not None:
            self.flash_attn = self.attn_implementation == "flash_attention_2"
            self.attn_implementation = None

    def check_modelscope(self) -> None:
        require(
            not self.use_ms or importlib.util.find_spec("modelscope") is not None,
            "--use_ms needs the modelscope package (pip install modelscope); or drop it to load from Hugging Face",
        )

    def check_model(self) -> None:
        require(bool(self.pretrain), "--pretrain is required: pass a model directory, s3:// URI or hub name")
        require(
            not self.revision or not (self.pretrain.startswith(("/", ".", "~")) or "://" in self.pretrain),
            f"--revision {self.revision}: --pretrain {self.pretrain} is a directory or store URI, not a hub name; "
            f"drop --revision (it pins a Hugging Face hub model)",
        )
        require(self.ring_attn_size >= 1, f"--ring_attn_size {self.ring_attn_size}: must be >= 1 (1 turns it off)")
        require(self.ring_head_stride >= 1, f"--ring_head_stride {self.ring_head_stride}: must be >= 1")
        if self.load_in_4bit and hasattr(self, "lora_rank"):  # training: 4-bit weights are frozen, so LoRA
            require(
                self.lora_rank > 0,
                "--load_in_4bit trains LoRA adapters on a frozen 4-bit base (QLoRA): also pass --lora_rank, e.g. 64",
            )


@dataclass
class LoraConfig:
    lora_rank: int = opt(0, "LoRA rank; 0 trains all weights", dotted="ds.lora.rank")
    lora_alpha: int = opt(16, "LoRA scaling alpha", dotted="ds.lora.alpha")
    lora_dropout: float = opt(0.0, "LoRA dropout", dotted="ds.lora.dropout")
    target_modules: list[str] = opt(
        ["all-linear"], "Modules that get LoRA adapters (names, or all-linear)", dotted="ds.lora.target_modules"
    )

    def check_lora(self) -> None:
        require(self.lora_rank >= 0, f"--lora_rank {self.lora_rank}: must be >= 0 (0 disables LoRA)")
        # the adapters' output is scaled by alpha/rank: alpha 0 trains adapters that change nothing
        require(
            self.lora_rank == 0 or self.lora_alpha > 0,
            f"--lora_alpha {self.lora_alpha}: must be > 0 with --lora_rank {self.lora_rank} (the adapters are "
            f"scaled by alpha/rank; 0 leaves the model unchanged): pass e.g. --lora_alpha {2 * self.lora_rank}",
        )
        require(0.0 <= self.lora_dropout < 1.0, f"--lora_dropout {self.lora_dropout}: must be in [0, 1)")


@dataclass
class LoraSaveConfig:
    """How a LoRA-trained policy is saved (SFT, DPO, KTO, PPO). A reward model is always saved merged:
    its config.json carries the reward's normalisation, which an adapter folder has no place for."""

    own_group: ClassVar[str] = "ds.lora"

    merge_lora: bool = opt(
        False,
        "With --lora_rank: also save the model with the adapters merged in (save_path holds "
        "the merged model, save_path/adapter the adapter). Without it save_path holds only "
        "the PEFT adapter (adapter_config.json names the base), as OpenRLHF and TRL save it; "
        "every alignflow stage and `from_pretrained` (with peft installed) load it",
    )


@dataclass
class PackingConfig:
    packing_samples: bool = opt(
        False,
        "Pack several samples into one row for the training forward passes, keeping "
        "per-sample positions and attention (same losses, less padding computed)",
        dotted="ds.packing_samples",
    )


DATASET_NUM_PROC_HELP = (
    "Processes tokenizing the data (Dataset.map num_proc; TRL's name). 0: 1 below 10,000 rows "
    "(starting workers costs more than it saves), else min(8, cores). Not part of the stage "
    "identity: the tokens are the same either way"
)


@dataclass
class PromptFormatConfig:
    """How a row's prompt becomes text (every stage that reads prompts: SFT, RM, DPO, KTO, PPO, batch inference)."""

    input_key: str = opt(
        "input", "JSON key of the prompt / conversation (a string or a list of messages)", dotted="data.input_key"
    )
    input_template: Optional[str] = opt(
        None, "Template wrapping the prompt, e.g. 'User: {}\\nAssistant: '", dotted="data.input_template"
    )
    apply_chat_template: bool = opt(
        False, "Render prompts with the tokenizer's chat template", dotted="data.apply_chat_template"
    )

    def check_prompt_format(self) -> None:
        require(
            not (self.input_template and self.apply_chat_template),
            "--input_template and --apply_chat_template both given: pick one way to format prompts",
        )
        if self.input_template:
            require(
                "{}" in self.input_template,
                f"--input_template {self.input_template!r} has no '{{}}' where the prompt goes",
            )
            try:  # how it is used: input_template.format(prompt), one positional slot
                self.input_template.format("")
            except (IndexError, KeyError, ValueError) as e:
                raise ConfigError(
                    f"--input_template {self.input_template!r}: str.format fails with one prompt "
                    f"({type(e).__name__}: {e}); use exactly one '{{}}' where the prompt goes and write a "
                    f"literal brace as '{{{{' or '}}}}'"
                ) from None


@dataclass
class DataConfig(PromptFormatConfig, PackingConfig):
    own_group: ClassVar[str] = "data"

    dataset: Optional[str] = opt(
        None,
        "Comma-separated datasets: .jsonl/.json files, json@DIR, directories, store URIs or hub names",
        path="data",
        dotted={"": "data.dataset", "opd": "data.prompt_dataset"},
    )
    dataset_probs: Optional[str] = opt(
        None,
        "Comma-separated sampling probabilities for --dataset (default: equal)",
        dotted={"": "data.dataset_probs", "opd": "data.prompt_probs"},
    )
    dataset_split: str = opt(
        "train", "Split to train on", dotted={"": "data.dataset_split", "opd": "data.prompt_split"}
    )
    eval_dataset: Optional[str] = opt(
        None, "Evaluation dataset (same forms as --dataset)", path="data", dotted="eval.dataset"
    )
    eval_split: str = opt("test", "Split to evaluate on", dotted="eval.split")
    max_samples: int = opt(
        100_000_000, "Use at most this many samples from the (mixed) dataset", dotted="data.max_samples"
    )
    dataset_num_proc: int = opt(0, DATASET_NUM_PROC_HELP, identity=False)
    max_len: int = opt(
        2048, "Truncate samples to this many tokens (truncations are counted and reported)", dotted="data.max_len"
    )
    output_key: Optional[str] = opt(None, "JSON key of the response", dotted="data.output_key")
    multiturn: bool = opt(
        False, "Train on every assistant turn of the conversation in --input_key", dotted="data.multiturn"
    )
    pretrain_mode: bool = opt(
        False,
        "Loss on every token (continued pre-training), not only the response",
        dotted="model.pretrain_mode_enable",
    )

    def check_data(self) -> None:
        require(bool(self.dataset), "--dataset is required: pass a .jsonl file, json@DIR or a hub name")
        require(self.max_len > 1, f"--max_len {self.max_len}: must be > 1")
        require(self.max_samples > 0, f"--max_samples {self.max_samples}: must be > 0")
        require(self.dataset_num_proc >= 0, f"--dataset_num_proc {self.dataset_num_proc}: must be >= 0 (0: automatic)")
        check_mixing("--dataset", self.dataset, "--dataset_probs", self.dataset_probs)


def check_mixing(data_flag: str, specs: str, probs_flag: str, probs: str | None) -> None:
    """One probability per comma-separated dataset, numbers >= 0, not all 0."""
    if not probs:
        return
    n_sets = len(specs.split(","))
    try:
        values = [float(p) for p in probs.split(",")]
    except ValueError:
        raise ConfigError(f"{probs_flag} {probs!r}: use comma-separated numbers like 0.3,0.7") from None
    require(
        len(values) == n_sets,
        f"{probs_flag} has {len(values)} values for {n_sets} datasets: give one per {data_flag} entry",
    )
    bad = [p.strip() for p, v in zip(probs.split(","), values) if not math.isfinite(v)]  # float() takes inf and nan
    require(not bad, f"{probs_flag} {probs}: {bad[0] if bad else ''} is not a finite number; give weights like 0.3,0.7")
    require(
        all(v >= 0 for v in values) and sum(values) > 0,
        f"{probs_flag} {probs}: probabilities must be >= 0 and not all 0",
    )
