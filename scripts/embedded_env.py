"""The environment both demos run in: offline, CPU DeepSpeed, and a private Prefect home under
runs/<name>/prefect (so ~/.prefect stays untouched). Call before prefect is imported."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def setup(name: str) -> Path:
    """Set the demo's environment; returns the repository root (also put on sys.path)."""
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_HOME", str(REPO / "runs" / name / "prefect"))
    Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
    return REPO
