"""The preference stages' configs (RM, DPO, KTO): each loss's own flags and each stage's groups (pair data
and the reference model: config/pairs.py)."""

from __future__ import annotations

from dataclasses import dataclass

from alignment.config.base import opt, require
from alignment.config.checkpoints import CheckpointConfig, Checkpoints
from alignment.config.engine_knobs import EngineKnobs, EngineKnobsData
from alignment.config.groups import (
    Data,
    DataConfig,
    Lora,
    LoraConfig,
    LoraSaveConfig,
    Packing,
    PretrainMode,
    PromptFormat,
)
from alignment.config.model import Model, ModelConfig, ModelData, ModelDS
from alignment.config.pairs import PairData, PairDataConfig, Reference, ReferenceConfig, ReferenceModel
from alignment.config.runs import Adam, MoE, MoEConfig, Muon, Ranks, RanksConfig, TrainConfig, TrainDS
from alignment.config.stages import SFTDS, Logger, SFTEval, SFTTrain, StageConfig
from alignment.config.tracking import LoggingConfig
from alignment.config.tree import group, stage, subgroup
from alignment.config.vision import TrainedVision, TrainedVisionConfig, VisionData


@dataclass(frozen=True)
class RMModelOwn:
    """The `model` settings only RM has."""

    loss_type: str = opt(
        "sigmoid",
        "Pairwise loss: sigmoid = -log σ(r_c - r_r - margin); logexp = log(1 + e^(r_r - r_c))",
        choices=("sigmoid", "logexp"),
        dotted="model.loss_type",
        flat="loss",
    )
    margin_loss_enable: bool = opt(
        False,
        "Subtract each row's 'margin' inside the sigmoid loss",
        dotted="model.margin_loss_enable",
        flat="margin_loss",
    )
    center_rewards_coefficient: float = opt(
        0.0,
        "Add this times (r_c + r_r)² to each pair's loss (TRL's name; 0: off): pins each prompt's reward offset "
        "so a score means the same on every prompt, e.g. 0.01",
    )
    compute_fp32_loss_enable: bool = opt(
        False,
        "Compute rewards and the loss in fp32 even when training in bf16",
        dotted="model.compute_fp32_loss_enable",
        flat="compute_fp32_loss",
    )


@dataclass(frozen=True)
class RMDSOwn:
    """The `ds` settings only RM has."""

    value_head_prefix: str = opt(
        "score",
        "Name of the value head in the saved weights ('score' loads with AutoModelForSequenceClassification)",
        dotted="ds.value_head_prefix",
    )


@dataclass(frozen=True)
class RMModel(RMModelOwn, MoE, PretrainMode, Model):
    pass


@dataclass(frozen=True)
class RMDS(RMDSOwn, TrainDS, EngineKnobs, Packing, ModelDS):
    lora: Lora = subgroup(Lora)


@dataclass(frozen=True)
class RMData(EngineKnobsData, PairData, Data, PromptFormat, ModelData):
    pass


@stage
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

    model = group(RMModel)
    ds = group(RMDS)
    data = group(RMData)
    eval = group(SFTEval)
    train = group(SFTTrain)
    adam = group(Adam)
    muon = group(Muon)
    ckpt = group(Checkpoints)
    logger = group(Logger)
    ranks = group(Ranks)

    def check_rm(self) -> None:
        require(
            self.model.center_rewards_coefficient >= 0,
            f"--center_rewards_coefficient {self.model.center_rewards_coefficient}: must be >= 0 (e.g. 0.01)",
        )
        require(
            not (self.model.margin_loss_enable and self.model.loss_type == "logexp"),
            "--margin_loss needs --loss sigmoid (logexp has no margin term)",
        )
        require(
            self.ds.value_head_prefix.isidentifier(),
            f"--value_head_prefix {self.ds.value_head_prefix!r}: must be a "
            f"Python identifier, e.g. score or value_head",
        )


@dataclass(frozen=True)
class DPOModelOwn:
    """The `model` settings only DPO has."""

    label_smoothing: float = opt(
        0.0,
        "cDPO: assume this fraction of preference labels is flipped (0 = plain DPO)",
        dotted="model.label_smoothing",
    )
    ipo_enable: bool = opt(
        False, "IPO's squared loss instead of DPO's logistic one", dotted="model.ipo_enable", flat="ipo"
    )
    nll_loss_coef: float = opt(
        0.0, "Add this times the NLL of the chosen responses (RPO-style regulariser)", dotted="model.nll_loss_coef"
    )


@dataclass(frozen=True)
class DPOModel(DPOModelOwn, TrainedVision, MoE, ReferenceModel, PretrainMode, Model):
    pass


@dataclass(frozen=True)
class DPOData(VisionData, EngineKnobsData, PairData, Data, PromptFormat, ModelData):
    pass


@stage
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

    model = group(DPOModel)
    ds = group(SFTDS)
    data = group(DPOData)
    eval = group(SFTEval)
    ref = group(Reference)
    train = group(SFTTrain)
    adam = group(Adam)
    muon = group(Muon)
    ckpt = group(Checkpoints)
    logger = group(Logger)
    ranks = group(Ranks)

    def check_dpo(self) -> None:
        require(
            0.0 <= self.model.label_smoothing < 0.5,
            f"--label_smoothing {self.model.label_smoothing}: must be in [0, 0.5)",
        )
        require(
            not (self.model.ipo_enable and self.model.label_smoothing > 0),
            "--ipo with --label_smoothing > 0: IPO has no label-smoothing term; drop one of them",
        )
        require(self.model.nll_loss_coef >= 0, f"--nll_loss_coef {self.model.nll_loss_coef}: must be >= 0")


@dataclass(frozen=True)
class KTODataOwn:
    """The `data` settings only KTO has."""

    label_key: str = opt(
        "label", "JSON key of the desirable (true) / undesirable (false) label", dotted="data.label_key"
    )


@dataclass(frozen=True)
class KTOModelOwn:
    """The `model` settings only KTO has."""

    desirable_loss_weight: float = opt(
        1.0, "λ_D: weight of desirable samples' loss", dotted="model.desirable_loss_weight"
    )
    undesirable_loss_weight: float = opt(
        1.0, "λ_U: weight of undesirable samples' loss", dotted="model.undesirable_loss_weight"
    )


@dataclass(frozen=True)
class KTOModel(KTOModelOwn, ReferenceModel, PretrainMode, Model):
    pass


@dataclass(frozen=True)
class KTOData(KTODataOwn, EngineKnobsData, Data, PromptFormat, ModelData):
    pass


@stage
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

    model = group(KTOModel)
    ds = group(SFTDS)
    data = group(KTOData)
    eval = group(SFTEval)
    ref = group(Reference)
    train = group(SFTTrain)
    adam = group(Adam)
    muon = group(Muon)
    ckpt = group(Checkpoints)
    logger = group(Logger)
    ranks = group(Ranks)

    def check_kto(self) -> None:
        require(
            self.model.desirable_loss_weight > 0 and self.model.undesirable_loss_weight > 0,
            "--desirable_loss_weight and --undesirable_loss_weight must be > 0",
        )
        require(
            self.train.micro_batch_size >= 2,
            f"--micro_train_batch_size {self.train.micro_batch_size}: KTO "
            "needs >= 2 (the KL estimate pairs each prompt with another sample's response)",
        )
        require(bool(self.data.output_key), "--output_key is required for KTO: the JSON key of the response")
        require(
            not self.data.multiturn and not self.model.pretrain_mode_enable,
            "--multiturn and --pretrain_mode are SFT flags",
        )
