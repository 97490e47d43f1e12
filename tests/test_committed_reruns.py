"""What a flow does and logs around stages whose outputs are already committed, with no training:
the stages' outputs are stand-ins committed where the plan puts them.

A rerun of `sft-rm-ppo` with `heldout_eval` whose stages and evaluations are all saved starts no Ray
head (docs/pipeline.md): the evaluations are read from the store before the cluster is asked for;
each is one log line and a table artifact, not its JSON in the flow log. A round-based flow logs
the policy each round starts from."""

from __future__ import annotations

import asyncio
import json

from alignflow.flows.rejection_sampling import rejection_sampling_flow
from alignflow.flows.sft_rm_ppo import sft_rm_ppo_flow, sft_rm_ppo_steps
from alignflow.tasks.cluster import ray_cluster
from alignflow.tasks.orchestration import pipeline
from alignflow.tasks.orchestration.evaluate import evaluate_step
from alignflow.tasks.orchestration.pipeline import Output
from alignflow.tasks.orchestration.policy_pointer import read_pointer
from alignflow.tasks.orchestration.recipes import load_recipe
from alignflow.tasks.presentation.results import StageResult
from alignment import storage
from tests.flow_runs import flow_logs

SAVED = {
    "sft": {"accuracy": 0.75, "mean_reward": 0.75, "rows": 300.0},
    "ppo": {"accuracy": 0.783, "mean_reward": 0.783, "rows": 300.0},
}
EXAMPLES = {
    "sft": [
        {"question": "12+30", "response": "12+30=42", "label": "42", "right": True},
        {"question": "7+5", "response": "7+5=11", "label": "12", "right": False},
    ],
    "ppo": [{"question": "7+5", "response": "7+5=12", "label": "12", "right": True}],
}


def commit_stand_ins(store: str, run_name: str, tmp_path) -> None:
    """Every planned stage committed (a manifest over one placeholder file), and the evaluate stages of the
    heldout_eval run with their evaluation.json."""
    recipe = load_recipe("tiny")
    steps = sft_rm_ppo_steps(recipe, {}, {}, {}) + [evaluate_step(name, Output(name)) for name in SAVED]
    planned = pipeline.plan(steps, recipe, store, run_name)
    stand_in = tmp_path / "stand_in"
    stand_in.mkdir()
    (stand_in / "placeholder.txt").write_text("not a model: the rerun never loads it\n")
    for name, p in planned.items():
        label = name.removeprefix("evaluate ")
        if name.startswith("evaluate "):
            saved = tmp_path / f"eval-{label}"
            saved.mkdir()
            (saved / "evaluation.json").write_text(
                json.dumps({"task": "generate", "metrics": SAVED[label], "n": 300, "examples": EXAMPLES[label]})
            )
            storage.commit_dir(saved, p.model_uri, metadata={"final_metrics": SAVED[label]})
        else:
            storage.commit_dir(stand_in, p.model_uri, metadata={"final_metrics": {}})


def test_an_all_saved_rerun_starts_no_ray_head_and_logs_one_line_per_evaluation(tmp_path, monkeypatch):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    store = str(tmp_path / "store")
    commit_stand_ins(store, "saved", tmp_path)
    started = []
    monkeypatch.setattr(ray_cluster, "local_head", lambda *a, **k: started.append(a) or _refuse())
    state = asyncio.run(
        sft_rm_ppo_flow(run_name="saved", store=store, recipe="tiny", heldout_eval=True, return_state=True)
    )
    result = state.result()
    assert not started and all(r["skipped"] for r in result.values())
    assert result["ppo"]["heldout"]["metrics"] == SAVED["ppo"] and result["ppo"]["heldout"]["accuracy"] == 0.783
    log = flow_logs(state.state_details.flow_run_id)
    assert (
        "held-out evaluation after sft: accuracy 75.0%, mean_reward 0.75 (300 rows) (examples: artifact "
        "saved-heldout-sft)"
    ) in log
    assert '"examples"' not in log  # the evaluation's JSON stays in the store and the artifact

    async def table() -> list[dict]:
        async with get_client() as client:
            found = await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["saved-heldout-sft"]))
            )
        data = found[-1].data
        return json.loads(data) if isinstance(data, str) else data

    rows = asyncio.run(table())
    assert [(r["question"], r["right"]) for r in rows] == [("12+30", True), ("7+5", False)]


def _refuse():
    raise AssertionError("a Ray head was started for a rerun whose stages and evaluations are all saved")


def test_each_round_logs_the_policy_it_starts_from(tmp_path, monkeypatch):
    """Two rejection-sampling rounds, then one more run that continues from the pointer: the log
    names each round's starting model and where it came from."""
    store = str(tmp_path / "store")
    stand_in = tmp_path / "stand_in"
    stand_in.mkdir()
    (stand_in / "output.jsonl").write_text('{"input": "1+1", "output": "2"}\n')
    storage.commit_dir(stand_in, f"{store}/models/sft", metadata={"final_metrics": {}})

    async def commit_each(planned, runner, store, run_name, cluster):
        """pipeline.run with every step committed in place, no job run (the rounds' loop is tested)."""
        for name, p in planned.items():
            storage.commit_dir(stand_in, p.model_uri, metadata={"final_metrics": {}})
            yield name, StageResult(p.step.stage, p.model_uri, False, {"rows": 1.0})

    monkeypatch.setattr(pipeline, "run", commit_each)

    def run(**params):
        state = asyncio.run(
            rejection_sampling_flow(run_name="rs", store=store, recipe="tiny-rs", return_state=True, **params)
        )
        return state.result(), flow_logs(state.state_details.flow_run_id)

    first, log = run(initial_policy=f"{store}/models/sft", rounds=2)
    round1 = first["history"][0]["model_uri"]
    assert f"round 1 starts from {store}/models/sft (initial_policy)" in log
    assert f"round 2 starts from {round1} (the policy committed by round 1)" in log
    _, log = run(rounds=1)
    assert f"round 3 starts from {first['model_uri']} (the policy committed by round 2)" in log
    assert read_pointer(store, "rs").round == 3
