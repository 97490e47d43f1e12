"""What a run reports and where: logging cadence, evaluation cadence, TensorBoard and wandb (--logger.*)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from alignment.config.base import opt, require

# --use_wandb values that switch wandb on without being a key (any other value is the API key)
WANDB_SWITCHES = ("offline", "true", "1", "env")


# where a stage's offline tracking runs are kept (a flow sets it to the stage's folder in the store)
TRACKING_ENV = "ALIGNFLOW_TRACKING_URI"


@dataclass(frozen=True)
class Logging:
    """`logger` settings; LoggingConfig checks them."""

    logging_steps: int = opt(1, "Log metrics every N optimizer steps", identity=False, dotted="logger.logging_steps")
    tensorboard_dir: Optional[str] = opt(
        None,
        "Write TensorBoard events under this directory",
        identity=False,
        dotted="logger.tensorboard_dir",
        flat="use_tensorboard",
    )


@dataclass(frozen=True)
class EvalCadence:
    """`eval` settings; LoggingConfig checks them."""

    steps: int = opt(
        -1, "Evaluate every N steps (-1: at the end of each epoch)", dotted="eval.steps", flat="eval_steps"
    )


@dataclass(frozen=True)
class Wandb:
    """`logger.wandb` settings; LoggingConfig checks them."""

    key: Optional[str] = opt(
        None,
        "Log to Weights & Biases: 'env' (the key from WANDB_API_KEY), 'offline', or the API key "
        "(moved out of the command line at start). Never printed",
        secret=True,
        dotted="logger.wandb.key",
        flat="use_wandb",
    )
    org: Optional[str] = opt(None, "wandb entity", identity=False, dotted="logger.wandb.org", flat="wandb_org")
    group: Optional[str] = opt(None, "wandb group", identity=False, dotted="logger.wandb.group", flat="wandb_group")
    project: str = opt(
        "alignflow", "wandb project", identity=False, dotted="logger.wandb.project", flat="wandb_project"
    )
    run_name: Optional[str] = opt(
        None, "wandb run name", identity=False, dotted="logger.wandb.run_name", flat="wandb_run_name"
    )


class LoggingConfig:
    """The checks of `Logging` (`logger`), `EvalCadence` (`eval`), `Wandb` (`logger.wandb`): a stage's `validate()` runs
    them, before anything loads."""

    def check_logging(self) -> None:
        require(self.logger.logging_steps > 0, f"--logging_steps {self.logger.logging_steps}: must be > 0")
