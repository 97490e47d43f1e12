"""The preference stages' configs (RM, DPO, KTO): pair data, the reference model, each loss's own flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from alignment.config.base import opt, require
from alignment.config.checkpoints import CheckpointConfig
from alignment.config.groups import DataConfig, LoraConfig, LoraSaveConfig, ModelConfig
from alignment.config.runs import LoggingConfig, MoEConfig, RanksConfig, TrainConfig
from alignment.config.stages import StageConfig
from alignment.config.vision import TrainedVisionConfig


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
    MoEConfig,
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
    TrainedVisionConfig,
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
