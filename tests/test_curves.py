"""The pictures and report of a stage, without a cluster: which series each stage kind draws
(from a metrics.jsonl written like a trainer writes it), the PNG itself, the pipeline's report, a retried stage's
wall time, and SIGTERM through the flows' loop. Progress events and the progress line: tests/test_stage_progress.py."""

from __future__ import annotations

import asyncio
import json

import pytest

from alignflow.tasks.presentation import curves
from alignflow.tasks.presentation.artifacts import read_metrics
from alignflow.tasks.presentation.report import PipelineReport, StageLine, build_report

PNG = b"\x89PNG\r\n\x1a\n"

# What each trainer logs (key names as in alignment/trainers and alignment/ppo), every 5 steps,
# with an eval row every 10.
LOGGED = {
    "sft": (["loss", "lr"], ["loss"]),
    "rm": (["loss", "acc", "chosen_reward", "rejected_reward", "lr"], ["loss", "acc", "reward_mean"]),
    "dpo": (["loss", "reward_acc", "reward_margin", "chosen_reward", "lr"], ["loss", "reward_acc", "reward_margin"]),
    "kto": (["loss", "kl", "desirable_reward", "undesirable_reward"], ["loss", "reward_gap"]),
    "ppo": (
        [
            "reward",
            "kl",
            "response_length",
            "clipfrac",
            "policy_loss",
            "time_generate",
            "time_experience",
            "time_train",
            "time_sync",
        ],
        [],
    ),
}


def write_metrics(tmp_path, stage: str) -> str:
    train, evaluated = LOGGED[stage]
    rows = []
    for step in range(5, 31, 5):
        rows.append({"step": step, "time": 1.0, **{f"train/{k}": step / 10 for k in train}})
        if evaluated and step % 10 == 0:
            rows.append({"step": step, "time": 1.0, **{f"eval/{k}": step / 20 for k in evaluated}})
    model = tmp_path / stage / "model"
    model.mkdir(parents=True)
    (model / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(model)


EXPECTED = {
    "sft": {"loss": ["train/loss", "eval/loss"]},
    "rm": {"loss": ["train/loss", "eval/loss"], "pairwise accuracy": ["train/acc", "eval/acc"]},
    "dpo": {
        "loss": ["train/loss", "eval/loss"],
        "reward margin": ["train/reward_margin", "eval/reward_margin"],
        "reward accuracy": ["train/reward_acc", "eval/reward_acc"],
    },
    "kto": {
        "loss": ["train/loss", "eval/loss"],
        "implicit rewards": ["train/desirable_reward", "train/undesirable_reward", "eval/reward_gap"],
        "KL estimate": ["train/kl"],
    },
    "ppo": {
        "reward": ["train/reward"],
        "KL to the reference": ["train/kl"],
        "response length": ["train/response_length"],
        "policy": ["train/clipfrac"],
        "phase times": ["train/time_generate", "train/time_experience", "train/time_train", "train/time_sync"],
    },
}


@pytest.mark.parametrize("stage", sorted(EXPECTED))
def test_each_stage_kind_draws_its_series(tmp_path, stage):
    rows = read_metrics(write_metrics(tmp_path, stage))
    panels = curves.stage_panels(stage, rows)
    assert {p.title: list(p.series) for p in panels} == EXPECTED[stage]
    train_points = panels[0].series[EXPECTED[stage][panels[0].title][0]]
    assert train_points == [(float(s), s / 10) for s in range(5, 31, 5)]
    png = curves.render(panels, f"run / {stage}")
    assert png.startswith(PNG) and len(png) > 5000


def test_ppo_without_a_kl_term_has_no_kl_panel(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "train/kl"} for r in read_metrics(write_metrics(tmp_path, "ppo"))]
    assert "KL to the reference" not in [p.title for p in curves.stage_panels("ppo", rows)]


def test_ppo_agent_dapo_and_is_runs_add_their_panels(tmp_path):
    """Turns per episode, the filtered-group fraction, the IS weight and the held-out evaluation appear only in runs
    that log them."""
    rows = read_metrics(write_metrics(tmp_path, "ppo"))
    extra = {"train/agent/turns": 1.5, "train/dynamic_filtering/dropped_fraction": 0.25, "train/is_weight": 0.98}
    extra |= {"eval/pass1": 0.5, "eval/pass4": 0.75}  # --eval_dataset with --eval_n_samples_per_prompt 4
    extra |= {"train/dynamic_filtering/gradient_token_share": 0.3, "train/staleness/mean": 0.5}  # and --async_train
    panels = curves.stage_panels("ppo", [{**r, **extra} for r in rows])
    assert [p.title for p in panels][-5:] == [
        "agent turns",
        "dynamic filtering",
        "IS correction",
        "held-out evaluation",
        "staleness",
    ]
    assert sorted(panels[-2].series) == ["eval/pass1", "eval/pass4"]
    assert len(panels[-4].series) == 2 and list(panels[-1].series) == ["train/staleness/mean"]
    assert not {"agent turns", "dynamic filtering", "IS correction"} & {
        p.title for p in curves.stage_panels("ppo", rows)
    }


def test_reward_histogram_and_rounds_chart():
    hist = curves.reward_histogram([0.1, 0.5, 0.9, 0.9], "reward")
    assert hist[0].kind == "hist" and [y for _, y in hist[0].series["reward"]] == [0.1, 0.5, 0.9, 0.9]
    assert curves.render(hist, "t").startswith(PNG)
    history = [{"round": 1, "sampled_reward": 0.4}, {"round": 2, "sampled_reward": 0.55, "heldout_accuracy": 0.7}]
    panels = {p.title: p.series for p in curves.rounds_panels(history)}
    assert panels == {
        "held-out accuracy": {"heldout_accuracy": [(2.0, 0.7)]},
        "mean sampled reward": {"sampled_reward": [(1.0, 0.4), (2.0, 0.55)]},
    }
    assert curves.render([], "nothing") is None


def test_report_text_and_markdown(tmp_path):
    model = write_metrics(tmp_path, "ppo")
    result = {
        "sft": {
            "stage": "sft",
            "model_uri": "s3://b/run/sft-1/model",
            "skipped": True,
            "stage_wall_s": 0.1,
            "metrics": {"eval/loss": 0.5, "time/loop_s": 50.0},
            "heldout": {"accuracy": 0.75, "n": 300},
        },
        "ppo": {
            "stage": "ppo",
            "model_uri": model,
            "skipped": False,
            "stage_wall_s": 120.0,
            "stage_tries": 2,
            "metrics": {"train/reward": 0.6, "time/loop_s": 100.0},
            "heldout": {"accuracy": 0.79, "n": 300, "examples": [["1+1", "1+1=2", "2", True]]},
        },
    }
    rep = build_report("sft-rm-ppo", "demo", result, 150.0)
    assert isinstance(rep, PipelineReport) and [ln.label for ln in rep.lines] == ["sft", "ppo"]
    assert rep.phases == {
        "training loops": 100.0,
        "stage jobs' start-up, model loading, commits": 20.0,
        "Prefect + Ray start-up and the rest": 30.0,
    }
    text = rep.text()
    assert "after sft 75.0%, after ppo 79.0%" in text and "RL reward (score per sample, 6 iterations)" in text
    assert "[ok ] 1+1" in text and "120 s (2 tries)   100 s" in text
    # sqrt(.75 * .25 / 300 + .79 * .21 / 300) = 3.4 points: a 4-point gain is outside it, a 3-point one would not be
    assert "gain of ppo over sft: +4.0 points, outside the noise band of ±3.4 (one standard error" in text
    result["ppo"]["heldout"]["accuracy"] = 0.78
    assert "+3.0 points, inside the noise band of ±3.5" in build_report("sft-rm-ppo", "demo", result, 150.0).text()
    result["ppo"]["heldout"]["accuracy"] = 0.79
    md = rep.markdown({"ppo": b"\x89PNG fake"})
    assert "| sft | skipped (already committed) | - | eval loss 0.500 | `s3://b/run/sft-1/model` |" in md
    assert "| ppo | 120 s (2 tries) | 100 s |" in md
    assert "](s3://" not in md  # no link a browser can't open
    assert "| after ppo: 79.0% | 300 |" in md and "data:image/png;base64," in md
    assert "Gain of ppo over sft: +4.0 points, outside the noise band of ±3.4" in md
    assert isinstance(rep.lines[0], StageLine)


def test_a_retried_stage_counts_every_try(monkeypatch):
    """Prefect runs a retry by calling the task function again: the stage's wall time is still the
    sum of its tries' (here 2 × 0.5 s; the last try's alone was what the result used to say)."""
    from prefect import flow

    from alignflow.tasks.cluster.ray_job import StageJobFailed
    from alignflow.tasks.orchestration import stage
    from alignflow.tasks.presentation.results import StageResult

    tries = []

    async def one_try(name, *args):
        tries.append(name)
        await asyncio.sleep(0.5)
        if len(tries) == 1:
            raise StageJobFailed("a rank was killed")
        return StageResult(name, "file:///store/r/sft-1/model", False, {"train/loss": 1.0})

    monkeypatch.setattr(stage, "_run_try", one_try)
    # a stage that failed on its last try keeps its entry: other tests in this process may have left some
    before = set(stage._TRY_WALL_S)

    @flow
    async def one_stage():
        return await stage.run_stage.with_options(retries=1, retry_delay_seconds=0)(
            "sft", "r", "http://x", None, "1", "/store/r/sft-1"
        )

    result = asyncio.run(one_stage())
    assert tries == ["sft", "sft"] and result.tries == 2 and not result.skipped
    assert 1.0 <= result.wall_s < 5, result.wall_s
    assert result.summary()["stage_tries"] == 2 and set(stage._TRY_WALL_S) == before  # dropped once it succeeded


def test_sigterm_through_the_loop_cancels_every_flow_and_is_put_back_after_concurrent_flows():
    """alignflow/tasks/orchestration/sigterm.py: two flows at once in one loop (as test_stage_runner's pair runs)
    leave SIGTERM as they found it, whichever ends first; a SIGTERM meanwhile ends both with Prefect's
    TerminationSignal."""
    import os
    import signal

    from prefect.exceptions import TerminationSignal

    from alignflow.tasks.orchestration.sigterm import sigterm_cancels_this_task

    async def flow(seconds: float) -> None:
        async with sigterm_cancels_this_task():
            await asyncio.sleep(seconds)

    async def both(first: float, second: float, kill: bool = False) -> list:
        if kill:
            asyncio.get_running_loop().call_later(0.2, os.kill, os.getpid(), signal.SIGTERM)
        return await asyncio.gather(flow(first), flow(second), return_exceptions=True)

    before = signal.getsignal(signal.SIGTERM)
    for first, second in ((0.05, 0.1), (0.1, 0.05)):
        assert asyncio.run(both(first, second)) == [None, None]
        assert signal.getsignal(signal.SIGTERM) is before
    ended = asyncio.run(both(30, 30, kill=True))
    assert [type(e) for e in ended] == [TerminationSignal, TerminationSignal], ended
    assert signal.getsignal(signal.SIGTERM) is before
