"""Stage configs: each one a flat composition of the shared groups plus its own fields."""
from __future__ import annotations

from dataclasses import dataclass

from alignment.config.base import opt, require
from alignment.config.groups import (
    CheckpointConfig, DataConfig, LoggingConfig, LoraConfig, ModelConfig, TrainConfig,
)


@dataclass
class StageConfig:
    def validate(self) -> "StageConfig":
        """Run every group's checks (those that need no world size). Raises ConfigError."""
        for name in dir(self):
            if name.startswith("check_"):
                getattr(self, name)()
        return self


@dataclass
class SFTConfig(LoggingConfig, CheckpointConfig, TrainConfig, LoraConfig, DataConfig, ModelConfig, StageConfig):
    """Supervised fine-tuning (`python -m alignment.cli.train_sft`)."""

    def check_sft(self) -> None:
        if self.multiturn:
            require(self.apply_chat_template, "--multiturn needs --apply_chat_template (turns are found through the chat template)")


@dataclass
class TinyBaseConfig(StageConfig):
    """A seeded random-init tiny Llama with the tiny tokenizer (`python -m alignment.cli.make_tiny_base`)."""

    save_path: str = opt("./ckpt/tiny_base", "Where the model directory goes (local path or s3://)")
    seed: int = opt(0, "Seed of the random initialisation")
