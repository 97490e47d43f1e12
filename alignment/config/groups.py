"""Groups shared by the stages: LoRA (`ds.lora`), packing, the prompt format and the data (`data`, `eval`)
(the model: config/model.py; how a run runs: config/runs.py).

Each group is declared beside the class whose `check_<concern>()` checks it; a stage's `validate()` runs them
all, before any model or dataset is loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from alignment.config.base import ConfigError, opt, require


@dataclass(frozen=True)
class Lora:
    """`ds.lora` settings; LoraConfig checks them."""

    rank: int = opt(0, "LoRA rank; 0 trains all weights", dotted="ds.lora.rank", flat="lora_rank")
    alpha: int = opt(16, "LoRA scaling alpha", dotted="ds.lora.alpha", flat="lora_alpha")
    dropout: float = opt(0.0, "LoRA dropout", dotted="ds.lora.dropout", flat="lora_dropout")
    target_modules: list[str] = opt(
        ["all-linear"], "Modules that get LoRA adapters (names, or all-linear)", dotted="ds.lora.target_modules"
    )


class LoraConfig:
    """The checks of `Lora` (`ds.lora`): a stage's `validate()` runs them, before anything loads."""

    def check_lora(self) -> None:
        require(self.ds.lora.rank >= 0, f"--lora_rank {self.ds.lora.rank}: must be >= 0 (0 disables LoRA)")
        # the adapters' output is scaled by alpha/rank: alpha 0 trains adapters that change nothing
        require(
            self.ds.lora.rank == 0 or self.ds.lora.alpha > 0,
            f"--lora_alpha {self.ds.lora.alpha}: must be > 0 with --lora_rank {self.ds.lora.rank} (the adapters are "
            f"scaled by alpha/rank; 0 leaves the model unchanged): pass e.g. --lora_alpha {2 * self.ds.lora.rank}",
        )
        require(0.0 <= self.ds.lora.dropout < 1.0, f"--lora_dropout {self.ds.lora.dropout}: must be in [0, 1)")


@dataclass(frozen=True)
class LoraSave:
    """`ds.lora` settings; LoraSaveConfig checks them."""

    merge_lora: bool = opt(
        False,
        "With --lora_rank: also save the model with the adapters merged in (save_path holds "
        "the merged model, save_path/adapter the adapter). Without it save_path holds only "
        "the PEFT adapter (adapter_config.json names the base), as OpenRLHF and TRL save it; "
        "every alignflow stage and `from_pretrained` (with peft installed) load it",
    )


class LoraSaveConfig:
    """How a LoRA-trained policy is saved (SFT, DPO, KTO, PPO). A reward model is always saved merged:
    its config.json carries the reward's normalisation, which an adapter folder has no place for."""


@dataclass(frozen=True)
class Packing:
    """`ds` settings; PackingConfig checks them."""

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


@dataclass(frozen=True)
class PromptFormat:
    """`data` settings; PromptFormatConfig checks them."""

    input_key: str = opt(
        "input", "JSON key of the prompt / conversation (a string or a list of messages)", dotted="data.input_key"
    )
    input_template: Optional[str] = opt(
        None, "Template wrapping the prompt, e.g. 'User: {}\\nAssistant: '", dotted="data.input_template"
    )
    apply_chat_template: bool = opt(
        False, "Render prompts with the tokenizer's chat template", dotted="data.apply_chat_template"
    )


class PromptFormatConfig:
    """How a row's prompt becomes text (every stage that reads prompts: SFT, RM, DPO, KTO, PPO, batch inference)."""

    def check_prompt_format(self) -> None:
        require(
            not (self.data.input_template and self.data.apply_chat_template),
            "--input_template and --apply_chat_template both given: pick one way to format prompts",
        )
        if self.data.input_template:
            require(
                "{}" in self.data.input_template,
                f"--input_template {self.data.input_template!r} has no '{{}}' where the prompt goes",
            )
            try:  # how it is used: input_template.format(prompt), one positional slot
                self.data.input_template.format("")
            except (IndexError, KeyError, ValueError) as e:
                raise ConfigError(
                    f"--input_template {self.data.input_template!r}: str.format fails with one prompt "
                    f"({type(e).__name__}: {e}); use exactly one '{{}}' where the prompt goes and write a "
                    f"literal brace as '{{{{' or '}}}}'"
                ) from None


@dataclass(frozen=True)
class Data:
    """`data` settings; DataConfig checks them."""

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


@dataclass(frozen=True)
class EvalDataset:
    """`eval` settings; DataConfig checks them."""

    dataset: Optional[str] = opt(
        None, "Evaluation dataset (same forms as --dataset)", path="data", dotted="eval.dataset", flat="eval_dataset"
    )
    split: str = opt("test", "Split to evaluate on", dotted="eval.split", flat="eval_split")


@dataclass(frozen=True)
class PretrainMode:
    """`model` settings; DataConfig checks them."""

    pretrain_mode_enable: bool = opt(
        False,
        "Loss on every token (continued pre-training), not only the response",
        dotted="model.pretrain_mode_enable",
        flat="pretrain_mode",
    )


class DataConfig(PromptFormatConfig):
    """The checks of `Data` (`data`), `EvalDataset` (`eval`), `PretrainMode` (`model`): a stage's `validate()` runs
    them, before anything loads."""

    def check_data(self) -> None:
        require(bool(self.data.dataset), "--dataset is required: pass a .jsonl file, json@DIR or a hub name")
        require(self.data.max_len > 1, f"--max_len {self.data.max_len}: must be > 1")
        require(self.data.max_samples > 0, f"--max_samples {self.data.max_samples}: must be > 0")
        require(
            self.data.dataset_num_proc >= 0,
            f"--dataset_num_proc {self.data.dataset_num_proc}: must be >= 0 (0: automatic)",
        )
        check_mixing("--dataset", self.data.dataset, "--dataset_probs", self.data.dataset_probs)


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
