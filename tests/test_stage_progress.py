"""A running stage's progress, without a cluster: the progress events a trainer prints and their round trip, the
progress line the Prefect task logs and how often it updates the progress artifact, and a failing Prefect API that
never stops the stage (tests/test_curves.py: the pictures and the report)."""

from __future__ import annotations

import asyncio
import logging

from alignment.events import ProgressEvent, format_event, parse_event


def test_progress_events_round_trip_and_ignore_other_lines():
    ev = ProgressEvent(12, 40, 384, {"train/loss": 0.5})
    line = "(pid=123) " + format_event(ev)
    assert parse_event(line) == ev
    assert parse_event("sft:  30%|███ | 12/40 [00:03<00:07]") is None
    assert parse_event(format_event(ev)[:-5]) is None  # a torn line is shown as text, not parsed


def stage_progress(monkeypatch, update, redraw, level: str):
    """A StageProgress for run/sft whose Prefect calls are `update` and `redraw`, and the lines
    it logs at `level`."""
    from alignflow.tasks.presentation import progress as progress_mod

    monkeypatch.setattr(progress_mod, "aupdate_progress_artifact", update)
    monkeypatch.setattr(progress_mod, "publish_curves", redraw)
    lines: list[str] = []
    logger = logging.getLogger(f"test-progress-{level}")
    monkeypatch.setattr(logger, level, lambda fmt, *a: lines.append(fmt % a))
    p = progress_mod.StageProgress("run", "sft", logger)
    p.artifact_id = "the-progress-artifact"  # as start() sets it
    return p, lines


def test_progress_line_and_cadence(monkeypatch):
    from alignflow.tasks.presentation import progress as progress_mod

    updates, clock = [], [100.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: clock[0])
    monkeypatch.setenv("ALIGNFLOW_PROGRESS_EVERY_S", "10")
    monkeypatch.setenv("ALIGNFLOW_CURVE_EVERY_S", "1000")

    async def fake_update(artifact_id, progress):  # the Prefect API call, recorded
        updates.append(progress)

    async def fake_curves(*args, **kwargs):
        return None

    p, lines = stage_progress(monkeypatch, fake_update, fake_curves, "info")

    async def follow() -> None:
        assert not await p.on_line("plain job output")
        for step in range(0, 101):  # one event per second of (fake) time, 32 samples per step
            clock[0] = 100.0 + step
            row = {"train/loss": 2.0 - step / 100} if step % 25 == 0 else {}
            assert await p.on_line(format_event(ProgressEvent(step, 100, 32 * step, row)))
        await p.finish()

    asyncio.run(follow())
    assert len(lines) == 11  # t=0, then every 10 s: the last one at step 100
    assert lines[5] == "sft: step 50/100 (50%) · loss 1.5 · 32.0 samples/s · ETA 50s"
    assert lines[-1] == "sft: step 100/100 (100%) · loss 1 · 32.0 samples/s · ETA 0s"
    assert updates[-1] == 100.0 and len(updates) == 22  # every 5 s, and 100 % at the end
    assert [r["step"] for r in p.rows] == [0, 25, 50, 75, 100]
    p.stage, p.latest = "ppo", {"train/dynamic_filtering/prompts_generated": 41.0}
    p.latest["train/dynamic_filtering/gradient_token_share"] = 0.6  # --dynamic_filtering's cost, in the same line
    assert "· filter: 41 prompts generated, 60% of tokens to a gradient ·" in p.line(ProgressEvent(3, 10, 0, {}), 103.0)


def test_a_failing_prefect_api_does_not_stop_the_stage(monkeypatch):
    """Progress and live curves are best effort: an API error is a warning, the job goes on."""

    async def unreachable(*args, **kwargs):
        raise ConnectionError("prefect api unreachable")

    p, warnings = stage_progress(monkeypatch, unreachable, unreachable, "warning")
    consumed = asyncio.run(p.on_line(format_event(ProgressEvent(1, 10, 32, {"train/loss": 1.0}))))
    assert consumed and len(warnings) == 2 and "ConnectionError: prefect api unreachable" in warnings[0]
