"""Progress events: how a stage's process tells the pipeline where it is, through its log.

A stage runs as a Ray job; the Prefect task follows the job's log stream (it crosses nodes with
no extra server). With ALIGNFLOW_EVENTS=1 in its environment (the stage runner sets it), the
stage's rank 0 writes one line per event to stdout:

    @alignflow {"step": 120, "total": 1200, "samples": 1920, "row": {"train/loss": 0.52, ...}}

`row` is present when a metrics row was logged at that step (the same row as metrics.jsonl);
events without it only move the progress. The task consumes these lines (they never reach the
Prefect log) and turns them into the progress artifact, a steady log line and live curves.
Torch-free: both sides import it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

PREFIX = "@alignflow "
ENV_SWITCH = "ALIGNFLOW_EVENTS"


@dataclass
class ProgressEvent:
    step: int  # optimizer steps (PPO: iterations) done
    total: int  # of this many
    samples: int = 0  # samples (PPO: generated responses) seen so far in this process
    row: dict[str, float] = field(default_factory=dict)  # a logged metrics row, when there is one


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH) == "1"


def format_event(ev: ProgressEvent) -> str:
    body = {"step": ev.step, "total": ev.total, "samples": ev.samples}
    if ev.row:
        body["row"] = ev.row
    return PREFIX + json.dumps(body, separators=(",", ":"))


def parse_event(line: str) -> ProgressEvent | None:
    """The event on `line`, or None for any other line. Ray may prefix a worker's lines with
    "(pid=..)" tags, so the marker is searched, not matched at the start."""
    at = line.find(PREFIX)
    if at < 0:
        return None
    try:
        body = json.loads(line[at + len(PREFIX) :])
        return ProgressEvent(
            int(body["step"]),
            int(body["total"]),
            int(body.get("samples", 0)),
            {k: float(v) for k, v in body.get("row", {}).items()},
        )
    except (ValueError, KeyError, TypeError):
        return None  # a torn or foreign line: shown as a plain log line instead
