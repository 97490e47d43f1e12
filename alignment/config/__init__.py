"""One config schema per stage: the same dataclasses make the CLI flags, read YAML files and
are the Prefect flow parameters. Torch-free so the Prefect layer can import it."""

from alignment.config.base import ConfigError, opt
from alignment.config.checkpoints import CheckpointConfig
from alignment.config.cli import config_to_argv, load_yaml, parse_args
from alignment.config.distill import KDConfig, OPDConfig
from alignment.config.evaluate import EvaluateConfig
from alignment.config.groups import DataConfig, LoraConfig
from alignment.config.inference import BatchInferenceConfig
from alignment.config.model import ModelConfig
from alignment.config.ppo import PPOConfig
from alignment.config.preference import DPOConfig, KTOConfig, RMConfig
from alignment.config.runs import TrainConfig
from alignment.config.serving import ChatConfig
from alignment.config.stages import PRMConfig, SFTConfig
from alignment.config.tools import LoraCombinerConfig, TinyBaseConfig
from alignment.config.tracking import LoggingConfig

TrainerConfig = SFTConfig | RMConfig | DPOConfig | KTOConfig  # the stages alignment.trainers.base.Trainer runs
TrainingConfig = TrainerConfig | PPOConfig  # every stage that builds DeepSpeed training engines

__all__ = [
    "BatchInferenceConfig",
    "ChatConfig",
    "CheckpointConfig",
    "ConfigError",
    "DataConfig",
    "DPOConfig",
    "EvaluateConfig",
    "KDConfig",
    "KTOConfig",
    "OPDConfig",
    "RMConfig",
    "LoggingConfig",
    "LoraCombinerConfig",
    "LoraConfig",
    "ModelConfig",
    "PPOConfig",
    "PRMConfig",
    "SFTConfig",
    "TinyBaseConfig",
    "TrainConfig",
    "TrainerConfig",
    "TrainingConfig",
    "config_to_argv",
    "load_yaml",
    "opt",
    "parse_args",
]
