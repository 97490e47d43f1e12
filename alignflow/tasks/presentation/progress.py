"""A running stage in Prefect: a progress artifact, a steady log line and live curves, all fed by
the progress events the stage's process writes to its Ray job log (`alignment.events`).

    sft: step 300/1200 (25%) · loss 0.612 · eval/loss 0.655 · 61.2 samples/s · ETA 2m41s
    ppo: iteration 50/296 (17%) · reward 0.4308 · response_length 10.41 · clipfrac 0 · 159.8 samples/s · ETA 3m17s

The log line comes at most every ALIGNFLOW_PROGRESS_EVERY_S seconds (default 10), the curve
artifact is redrawn at most every ALIGNFLOW_CURVE_EVERY_S seconds (default 60), the progress
artifact at most every 5 s. Torch-free (runs in the Prefect process).
"""

from __future__ import annotations

import logging
import os
import time

from prefect.artifacts import acreate_progress_artifact, aupdate_progress_artifact

from alignflow.tasks.presentation import curves
from alignflow.tasks.presentation.artifacts import artifact_key, publish_curves
from alignment.events import ProgressEvent, parse_event

ARTIFACT_EVERY_S = 5.0  # each update is an API call to the Prefect server, beside training on the same cores


def every_s(name: str, default: float) -> float:
    value = os.environ.get(name, str(default))
    try:
        return max(0.0, float(value))
    except ValueError:
        raise ValueError(f"{name}={value!r}: give a number of seconds") from None


def duration(seconds: float) -> str:
    seconds = int(seconds)
    h, m, s = seconds // 3600, seconds // 60 % 60, seconds % 60
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def headline_keys(stage: str, row: dict[str, float]) -> list[str]:
    """Up to three metrics worth a log line: the stage's curve keys, in their order, present now."""
    wanted = [k for spec in curves.STAGE_PANELS.get(stage, ()) for k in spec.keys] or ["train/loss"]
    return [k for k in wanted if k in row][:3]


class StageProgress:
    def __init__(self, run_name: str, stage: str, logger: logging.Logger | logging.LoggerAdapter):
        self.run_name, self.stage, self.logger = run_name, stage, logger
        self.log_every = every_s("ALIGNFLOW_PROGRESS_EVERY_S", 10.0)
        self.curve_every = every_s("ALIGNFLOW_CURVE_EVERY_S", 60.0)
        self.rows: list[dict] = []
        self.latest: dict[str, float] = {}
        self.artifact_id = None
        self._first: tuple[float, ProgressEvent] | None = None
        self._last_log = self._last_artifact = self._last_curve = 0.0
        self._percent = 0.0
        self._event: ProgressEvent | None = None  # the latest event, and when it came
        self._now = 0.0

    async def start(self) -> None:
        self.artifact_id = await acreate_progress_artifact(
            0.0,
            key=artifact_key(self.run_name, self.stage, "progress"),
            description=f"{self.stage} of run {self.run_name}: optimizer steps (PPO: iterations) done",
        )

    async def _update(self, percent: float) -> None:
        """A progress artifact that can't be updated (the Prefect API is briefly unreachable) is
        a warning, not a reason to stop a healthy training job: the next update catches up."""
        try:
            await aupdate_progress_artifact(self.artifact_id, percent)
        except Exception as e:  # noqa: BLE001 - any API failure; logged, and the stage goes on
            self.logger.warning("progress artifact not updated (%s: %s); the stage goes on", type(e).__name__, e)

    async def _redraw(self, ev: ProgressEvent) -> None:
        try:
            await publish_curves(
                self.run_name,
                self.stage,
                curves.stage_panels(self.stage, self.rows),
                f"Live: step {ev.step}/{ev.total}.",
            )
        except Exception as e:  # noqa: BLE001 - as in _update: the final curve is drawn after the commit
            self.logger.warning("curve artifact not redrawn (%s: %s); the stage goes on", type(e).__name__, e)

    async def on_line(self, line: str) -> bool:
        """Consume `line` if it is a progress event (then it stays out of the Prefect log)."""
        ev = parse_event(line)
        if ev is None:
            return False
        now = time.monotonic()
        if self._first is None or ev.step < self._first[1].step:  # first event, or a restarted process
            self._first = (now, ev)
        if ev.row:
            self.rows.append({"step": ev.step, **ev.row})
            self.latest.update(ev.row)
        self._percent = 100.0 * ev.step / ev.total if ev.total else 0.0
        self._event, self._now = ev, now
        if now - self._last_artifact >= ARTIFACT_EVERY_S:
            self._last_artifact = now
            await self._update(self._percent)
        if now - self._last_log >= self.log_every:
            self._last_log = now
            self.logger.info("%s", self.line(ev, now))
        if self.rows and now - self._last_curve >= self.curve_every:
            self._last_curve = now
            await self._redraw(ev)
        return True

    def line(self, ev: ProgressEvent, now: float) -> str:
        unit = "iteration" if self.stage == "ppo" else "step"
        parts = [f"{self.stage}: {unit} {ev.step}/{ev.total} ({self._percent:.0f}%)"]
        parts += [f"{k.removeprefix('train/')} {self.latest[k]:.4g}" for k in headline_keys(self.stage, self.latest)]
        made, share = (
            self.latest.get(f"train/dynamic_filtering/{k}") for k in ("prompts_generated", "gradient_token_share")
        )
        if made is not None and share is not None:  # --dynamic_filtering: what this iteration's filter cost
            parts.append(f"filter: {made:.0f} prompts generated, {share:.0%} of tokens to a gradient")
        t0, first = self._first
        elapsed, steps = now - t0, ev.step - first.step
        if elapsed > 0 and steps > 0:
            if ev.samples > first.samples:
                parts.append(f"{(ev.samples - first.samples) / elapsed:.1f} samples/s")
            parts.append(f"ETA {duration((ev.total - ev.step) * elapsed / steps)}")
        return " · ".join(parts)

    async def finish(self) -> None:
        """The stage committed: the bar reads 100 % (an event-less stage's too), and the log ends
        with the last progress line, final metrics included."""
        if self._event is not None and self._last_log < self._now:
            self.logger.info("%s", self.line(self._event, self._now))
        if self.artifact_id is not None:
            await self._update(100.0)
