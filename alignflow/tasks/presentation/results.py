"""What a stage task returns (URIs and metrics, never weights) and where a committed model's stage folder is:
what the reports, curves and comparisons read. Orchestration makes these; presentation only reads them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class StageResult:
    """What a stage task returns: URIs and metrics, never weights."""

    stage: str
    model_uri: str
    skipped: bool
    metrics: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0  # every try's, summed
    tries: int = 0  # how many times the stage task ran (0: skipped, already committed)

    def summary(self, **extra: Any) -> dict[str, Any]:
        """What a flow returns per stage (JSON), and what its report is built from."""
        return {
            "stage": self.stage,
            "model_uri": self.model_uri,
            "skipped": self.skipped,
            "metrics": self.metrics,
            "stage_wall_s": round(self.wall_s, 2),
            "stage_tries": self.tries,
            **extra,
        }


def dir_of_model(model_uri: str) -> str:
    """The stage dir that holds a committed model (job_config puts the model at <stage dir>/model)."""
    return model_uri.rstrip("/").rsplit("/", 1)[0]
