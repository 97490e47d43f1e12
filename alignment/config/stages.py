"""Stage configs: each one a flat composition of the shared groups plus its own fields."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Optional

from alignment.config import nested
from alignment.config.base import check_store_uri, opt, require
from alignment.config.groups import DataConfig, LoraConfig, LoraSaveConfig, ModelConfig
from alignment.config.inside_models import check_outputs_outside_models
from alignment.config.paths import Outputs, check_output_paths
from alignment.config.runs import CheckpointConfig, LoggingConfig, MoEConfig, RanksConfig, TrainConfig

# Where stages write; their URI schemes are checked with the flags, before anything runs.
OUTPUT_FIELDS = ("save_path", "ckpt_path", "output_path")


@dataclass
class StageConfig:
    def __getattr__(self, name: str) -> Any:
        # reached only for a name that is no field, method or class attribute: a group (`cfg.train`,
        # alignment.config.nested); dunder probes (copy, pickle) must fail as on any object
        if not name.startswith("__") and name in nested.groups(type(self)):
            return nested.group(self, (name,))
        raise AttributeError(f"{type(self).__name__} has no field or group {name!r}")

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


@dataclass
class SFTConfig(
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

    def check_sft(self) -> None:
        if self.multiturn:
            require(
                self.apply_chat_template,
                "--multiturn needs --apply_chat_template (turns are found through the chat template)",
            )


@dataclass
class PRMConfig(SFTConfig):
    """Process reward model: a causal LM taught to answer each step's placeholder token with a reward
    token (`python -m alignment.cli.train_prm`)."""

    own_group: ClassVar[str] = "data"

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

    def check_prm(self) -> None:
        require(
            bool(self.placeholder_token),
            "--placeholder_token is required: the token that ends each step in --input_key (e.g. ки)",
        )
        require(
            not self.output_key and not self.multiturn and not self.pretrain_mode,
            "--output_key, --multiturn and --pretrain_mode are SFT flags; a PRM reads --input_key (the text "
            "with placeholders) and --label_key (one label per placeholder)",
        )
        require(
            not self.apply_chat_template and not self.input_template,
            "--apply_chat_template / --input_template: a PRM reads --input_key as written (placeholders "
            "included), as OpenRLHF's train_prm does; drop them",
        )
        if self.reward_tokens is not None:
            require(
                len(set(self.reward_tokens)) == len(self.reward_tokens) >= 2,
                f"--reward_tokens {' '.join(self.reward_tokens)}: need two or more distinct tokens, the "
                f"positive one first (e.g. + -)",
            )
            require(
                self.placeholder_token not in self.reward_tokens,
                f"--placeholder_token {self.placeholder_token} is also a reward token",
            )
        require(
            not self.lora_rank or self.merge_lora,
            "--lora_rank without --merge_lora: a PRM is committed merged (its config.json records the "
            "placeholder and reward tokens a PPO reward reads); add --merge_lora",
        )


@dataclass
class PairDataConfig:
    prompt_key: Optional[str] = opt(
        None,
        "JSON key of the prompt; without it chosen/rejected are whole conversations "
        "(the last turn is the answer) or plain texts",
        dotted="data.prompt_key",
    )
    chosen_key: str = opt("chosen", "JSON key of the preferred response", dotted="data.chosen_key")
    rejected_key: str = opt("rejected", "JSON key of the dispreferred response", dotted="data.rejected_key")

    def check_pair_data(self) -> None:
        require(
            not self.multiturn and not self.pretrain_mode,
            "--multiturn and --pretrain_mode are SFT flags; "
            "preference stages read --prompt_key/--chosen_key/--rejected_key",
        )


@dataclass
class ReferenceConfig:
    ref_pretrain: Optional[str] = opt(
        None,
        "Reference model (default: --pretrain, the policy's initial weights)",
        path="model",
        dotted="ref.model_name_or_path",
    )
    ref_offload: bool = opt(
        False, "Keep the frozen reference model in CPU memory (its forward runs there)", dotted="ref.offload"
    )
    beta: float = opt(0.1, "Strength of the implicit KL penalty toward the reference", dotted="model.beta")

    def check_reference(self) -> None:
        require(self.beta > 0, f"--beta {self.beta}: must be > 0")


@dataclass
class RMConfig(
    RanksConfig,
    LoggingConfig,
    CheckpointConfig,
    TrainConfig,
    LoraConfig,
    PairDataConfig,
    DataConfig,
    ModelConfig,
    StageConfig,
):
    """Reward model: a scalar head on a causal-LM backbone, trained on preference pairs
    (`python -m alignment.cli.train_rm`)."""

    loss: str = opt(
        "sigmoid",
        "Pairwise loss: sigmoid = -log σ(r_c - r_r - margin); logexp = log(1 + e^(r_r - r_c))",
        choices=("sigmoid", "logexp"),
        dotted="model.loss_type",
    )
    margin_loss: bool = opt(
        False, "Subtract each row's 'margin' inside the sigmoid loss", dotted="model.margin_loss_enable"
    )
    center_rewards_coefficient: float = opt(
        0.0,
        "Add this times (r_c + r_r)² to each pair's loss (TRL's name; 0: off): pins each prompt's reward offset "
        "so a score means the same on every prompt, e.g. 0.01",
        group="model",
    )
    compute_fp32_loss: bool = opt(
        False,
        "Compute rewards and the loss in fp32 even when training in bf16",
        dotted="model.compute_fp32_loss_enable",
    )
    value_head_prefix: str = opt(
        "score",
        "Name of the value head in the saved weights ('score' loads with AutoModelForSequenceClassification)",
        dotted="ds.value_head_prefix",
    )

    def check_rm(self) -> None:
        require(
            self.center_rewards_coefficient >= 0,
            f"--center_rewards_coefficient {self.center_rewards_coefficient}: must be >= 0 (e.g. 0.01)",
        )
        require(
            not (self.margin_loss and self.loss == "logexp"),
            "--margin_loss needs --loss sigmoid (logexp has no margin term)",
        )
        require(
            self.value_head_prefix.isidentifier(),
            f"--value_head_prefix {self.value_head_prefix!r}: must be a "
            f"Python identifier, e.g. score or value_head",
        )


@dataclass
class DPOConfig(
    RanksConfig,
    LoggingConfig,
    CheckpointConfig,
    MoEConfig,
    TrainConfig,
    LoraConfig,
    LoraSaveConfig,
    ReferenceConfig,
    PairDataConfig,
    DataConfig,
    ModelConfig,
    StageConfig,
):
    """DPO / IPO / cDPO on preference pairs against a frozen reference (`python -m alignment.cli.train_dpo`)."""

    label_smoothing: float = opt(
        0.0,
        "cDPO: assume this fraction of preference labels is flipped (0 = plain DPO)",
        dotted="model.label_smoothing",
    )
    ipo: bool = opt(False, "IPO's squared loss instead of DPO's logistic one", dotted="model.ipo_enable")
    nll_loss_coef: float = opt(
        0.0, "Add this times the NLL of the chosen responses (RPO-style regulariser)", dotted="model.nll_loss_coef"
    )

    def check_dpo(self) -> None:
        require(0.0 <= self.label_smoothing < 0.5, f"--label_smoothing {self.label_smoothing}: must be in [0, 0.5)")
        require(
            not (self.ipo and self.label_smoothing > 0),
            "--ipo with --label_smoothing > 0: IPO has no label-smoothing term; drop one of them",
        )
        require(self.nll_loss_coef >= 0, f"--nll_loss_coef {self.nll_loss_coef}: must be >= 0")


@dataclass
class KTOConfig(
    RanksConfig,
    LoggingConfig,
    CheckpointConfig,
    TrainConfig,
    LoraConfig,
    LoraSaveConfig,
    ReferenceConfig,
    DataConfig,
    ModelConfig,
    StageConfig,
):
    """KTO on unpaired desirable/undesirable responses (`python -m alignment.cli.train_kto`)."""

    label_key: str = opt(
        "label", "JSON key of the desirable (true) / undesirable (false) label", dotted="data.label_key"
    )
    desirable_loss_weight: float = opt(
        1.0, "λ_D: weight of desirable samples' loss", dotted="model.desirable_loss_weight"
    )
    undesirable_loss_weight: float = opt(
        1.0, "λ_U: weight of undesirable samples' loss", dotted="model.undesirable_loss_weight"
    )

    def check_kto(self) -> None:
        require(
            self.desirable_loss_weight > 0 and self.undesirable_loss_weight > 0,
            "--desirable_loss_weight and --undesirable_loss_weight must be > 0",
        )
        require(
            self.micro_train_batch_size >= 2,
            f"--micro_train_batch_size {self.micro_train_batch_size}: KTO "
            "needs >= 2 (the KL estimate pairs each prompt with another sample's response)",
        )
        require(bool(self.output_key), "--output_key is required for KTO: the JSON key of the response")
        require(not self.multiturn and not self.pretrain_mode, "--multiturn and --pretrain_mode are SFT flags")


# the stages alignment.trainers.base.Trainer runs
TrainerConfig = SFTConfig | RMConfig | DPOConfig | KTOConfig
