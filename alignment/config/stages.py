"""Stage configs: each one a tree of groups (alignment.config.tree), composed from the shared groups and its
own. The base every stage shares (StageConfig), SFT and PRM here; the preference stages (RM, DPO, KTO) in
config/preference.py."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

from alignment.config.base import check_store_uri, opt, require
from alignment.config.checkpoints import CheckpointConfig, Checkpoints
from alignment.config.engine_knobs import EngineKnobs, EngineKnobsData, EngineKnobsTrain
from alignment.config.groups import (
    Data,
    DataConfig,
    EvalDataset,
    Lora,
    LoraConfig,
    LoraSave,
    LoraSaveConfig,
    Packing,
    PretrainMode,
    PromptFormat,
)
from alignment.config.inside_models import check_outputs_outside_models
from alignment.config.model import Model, ModelConfig, ModelData, ModelDS
from alignment.config.paths import Outputs, check_output_paths
from alignment.config.runs import Adam, MoE, MoEConfig, Muon, Ranks, RanksConfig, Train, TrainConfig, TrainDS
from alignment.config.tracking import EvalCadence, Logging, LoggingConfig, Wandb
from alignment.config.tree import BUILT, group, stage, subgroup
from alignment.config.vision import TrainedVision, TrainedVisionConfig, VisionData

# Where stages write; their URI schemes are checked with the flags, before anything runs.
OUTPUT_FIELDS = ("save_path", "ckpt_path", "output_path")


class StageConfig:
    """What every stage's config does: its outputs and its checks (its groups: alignment.config.tree)."""

    def __setattr__(self, name: str, value: object) -> None:
        self.__dict__.pop(BUILT, None)  # a field changes: the groups built from the old values go
        object.__setattr__(self, name, value)

    def outputs(self) -> Outputs:
        given = {name: getattr(self, name, None) for name in (*OUTPUT_FIELDS, "save_steps", "save_minutes")}
        flag = "save_path" if given["save_path"] else "output_path"
        cadence = (given["save_steps"] or -1) > 0 or (given["save_minutes"] or 0) > 0
        writes = cadence and not getattr(self, "disable_ds_ckpt", True)
        return Outputs(f"--{flag}", given[flag], given["ckpt_path"], writes)

    def check_outputs_outside_models(self) -> None:
        check_outputs_outside_models(self)  # alignment/config/inside_models.py

    def validate(self) -> "StageConfig":
        """Every field with choices holds one of them (a YAML file or a flow parameter skips argparse),
        output URIs have a known scheme and no output's commit would replace a file or an input model,
        then every group's checks (those that need no world size). Raises ConfigError."""
        for f in fields(self):
            choices = f.metadata.get("choices")
            value = getattr(self, f.name)
            require(
                not choices or value is None or value in choices,
                f"--{f.name} {value!r}: not one of {', '.join(map(str, choices or ()))}",
            )
        for name in OUTPUT_FIELDS:
            check_store_uri(f"--{name}", getattr(self, name, None))
        check_output_paths(self)
        for name in dir(self):  # derived values (resolve_*) before the checks that read them
            if name.startswith("resolve_"):
                getattr(self, name)()
        for name in dir(self):
            if name.startswith("check_"):
                getattr(self, name)()
        return self


@dataclass(frozen=True)
class SFTModel(TrainedVision, MoE, PretrainMode, Model):
    pass


@dataclass(frozen=True)
class TrainedLora(Lora, LoraSave):
    pass


@dataclass(frozen=True)
class SFTDS(TrainDS, EngineKnobs, Packing, ModelDS):
    lora: TrainedLora = subgroup(TrainedLora)


@dataclass(frozen=True)
class SFTData(VisionData, EngineKnobsData, Data, PromptFormat, ModelData):
    pass


@dataclass(frozen=True)
class SFTEval(EvalCadence, EvalDataset):
    pass


@dataclass(frozen=True)
class SFTTrain(Train, EngineKnobsTrain):
    pass


@dataclass(frozen=True)
class Logger(Logging):
    wandb: Wandb = subgroup(Wandb)


@stage
class SFTConfig(
    TrainedVisionConfig,
    RanksConfig,
    LoggingConfig,
    CheckpointConfig,
    MoEConfig,
    TrainConfig,
    LoraConfig,
    LoraSaveConfig,
    DataConfig,
    ModelConfig,
    StageConfig,
):
    """Supervised fine-tuning (`python -m alignment.cli.train_sft`)."""

    model = group(SFTModel)
    ds = group(SFTDS)
    data = group(SFTData)
    eval = group(SFTEval)
    train = group(SFTTrain)
    adam = group(Adam)
    muon = group(Muon)
    ckpt = group(Checkpoints)
    logger = group(Logger)
    ranks = group(Ranks)

    def check_sft(self) -> None:
        if self.data.multiturn:
            require(
                self.data.apply_chat_template,
                "--multiturn needs --apply_chat_template (turns are found through the chat template)",
            )


@dataclass(frozen=True)
class PRMDataOwn:
    """The `data` settings only PRM has."""

    placeholder_token: Optional[str] = opt(
        None,
        "The token that ends each reasoning step in --input_key; the "
        "model's logits there are the step's reward (one token of the "
        "tokenizer, e.g. ки)",
    )
    reward_tokens: Optional[list[str]] = opt(
        None,
        "The label tokens, e.g. + - (the first is the positive one): the "
        "loss compares their logits only. Without them the whole "
        "vocabulary is trained and the model cannot be a PPO reward",
    )
    label_key: str = opt(
        "label",
        "JSON key of the per-step labels: a list of reward tokens (hard) or of numbers "
        "in [0, 1], the probability the step is good (soft), one per placeholder",
        dotted="data.label_key",
    )


@dataclass(frozen=True)
class PRMData(PRMDataOwn, VisionData, EngineKnobsData, Data, PromptFormat, ModelData):
    pass


@stage
class PRMConfig(SFTConfig):
    """Process reward model: a causal LM taught to answer each step's placeholder token with a reward
    token (`python -m alignment.cli.train_prm`)."""

    data = group(PRMData)  # SFT's groups, but for this

    def check_prm(self) -> None:
        require(
            not self.with_images,
            f"--max_images_per_prompt {self.data.max_images_per_prompt}: the process reward model reads text only; "
            f"drop the image flags",
        )
        require(
            bool(self.data.placeholder_token),
            "--placeholder_token is required: the token that ends each step in --input_key (e.g. ки)",
        )
        require(
            not self.data.output_key and not self.data.multiturn and not self.model.pretrain_mode_enable,
            "--output_key, --multiturn and --pretrain_mode are SFT flags; a PRM reads --input_key (the text "
            "with placeholders) and --label_key (one label per placeholder)",
        )
        require(
            not self.data.apply_chat_template and not self.data.input_template,
            "--apply_chat_template / --input_template: a PRM reads --input_key as written (placeholders "
            "included), as OpenRLHF's train_prm does; drop them",
        )
        if self.data.reward_tokens is not None:
            require(
                len(set(self.data.reward_tokens)) == len(self.data.reward_tokens) >= 2,
                f"--reward_tokens {' '.join(self.data.reward_tokens)}: need two or more distinct tokens, the "
                f"positive one first (e.g. + -)",
            )
            require(
                self.data.placeholder_token not in self.data.reward_tokens,
                f"--placeholder_token {self.data.placeholder_token} is also a reward token",
            )
        require(
            not self.ds.lora.rank or self.ds.lora.merge_lora,
            "--lora_rank without --merge_lora: a PRM is committed merged (its config.json records the "
            "placeholder and reward tokens a PPO reward reads); add --merge_lora",
        )
