"""Pipelines that decide, for real (Prefect's ephemeral API -> Ray jobs on the session's head, from the
tiny SFT model): an iterative-DPO round whose learning rate wrecks the policy is not promoted while a
harmless one is, the report says why, `python -m alignflow.policy rollback` moves the pointer, and a round
whose job fails leaves the pointer where it was; the
`compare` flow trains two variants at the same time, evaluates both, and a rerun skips both."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from alignflow.flows.compare import compare_flow
from alignflow.flows.iterative_dpo import iterative_dpo_flow
from alignflow.tasks.orchestration.policy_pointer import read_pointer
from alignment import storage
from tests.flow_runs import flow_logs, ray_jobs

pytestmark = pytest.mark.integration

EVAL = {"max_samples": 100}  # held-out questions per evaluation
# 128 prompts x 4 samples make a few pairs; DPO takes 2 steps of them
ROUND = dict(generate={"rollout_batch_size": 128}, evaluate=EVAL, gate={"metric": "accuracy"})
DPO = {"max_epochs": 1, "max_steps": 2, "save_steps": -1, "train_batch_size": 2, "micro_train_batch_size": 1}


def test_a_wrecked_round_is_not_promoted_a_harmless_one_is_and_rollback_moves_the_pointer(ray_head, tiny_sft, tmp_path):
    store = str(tmp_path / "store")

    def run(lr: float, **params):
        state = asyncio.run(
            iterative_dpo_flow(
                run_name="gated",
                store=store,
                recipe="tiny-idpo",
                ray_address=ray_head,
                dpo={**DPO, "learning_rate": lr},
                return_state=True,
                **ROUND,
                **params,
            )
        )
        return state.result(), flow_logs(state.state_details.flow_run_id)

    # lr 1e-9 leaves greedy answers as they were: as good as the policy (margin 0), so promoted
    first, _ = run(1e-9, initial_policy=str(tiny_sft))
    round1 = first["history"][0]
    assert round1["promoted"] and first["model_uri"] == round1["model_uri"] and round1["data_rows"] > 0
    assert round1["evaluation"]["accuracy"] >= round1["policy_evaluation"]["accuracy"] > 0.5
    dpo_config = storage.read_manifest(first["model_uri"])["metadata"]["config"]
    assert dpo_config["pretrain"] == str(tiny_sft) and dpo_config["ref_pretrain"] is None  # ref = the policy
    assert dpo_config["dataset"] == round1["data"]
    # lr 0.05 (Adam: every weight moves by ~0.05 per step) wrecks it: kept in the store, not promoted
    second, log = run(0.05)
    round2 = second["history"][1]
    assert not round2["promoted"] and storage.is_committed(round2["model_uri"])
    assert second["model_uri"] == first["model_uri"] and second["round"] == 2
    assert round2["evaluation"]["accuracy"] < round2["policy_evaluation"]["accuracy"]
    assert f"round 2: {round2['model_uri']} not promoted, the policy stays: accuracy" in log  # the report's note
    # the current policy's evaluation was cached by identity: round 2 did not evaluate it again
    evals = [j for j in ray_jobs(ray_head, "gated") if (j.metadata or {}).get("alignflow_stage") == "evaluate"]
    assert len(evals) == 3

    def policy(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "alignflow.policy", *args, "--store", store, "--run_name", "gated"],
            capture_output=True,
            text=True,
        )

    shown = policy("show")
    assert shown.returncode == 0 and "round 2: " in shown.stdout and "not promoted" in shown.stdout
    assert policy("rollback", "--round", "2").returncode == 0
    assert read_pointer(store, "gated").model_uri == round2["model_uri"]
    assert policy("rollback", "--round", "1").returncode == 0
    assert read_pointer(store, "gated").model_uri == first["model_uri"]
    bad = policy("rollback", "--round", "7")
    assert bad.returncode == 2 and bad.stderr.strip() == "error: run 'gated' has no round 7 (rounds: 1, 2)"

    # round 3's DPO job dies after its first step (no retries): the pointer stays where it was
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ALIGNFLOW_FAIL_AT_STEP", "1")
        with pytest.raises(Exception, match="simulated failure"):
            asyncio.run(
                iterative_dpo_flow(
                    run_name="gated",
                    store=store,
                    recipe="tiny-idpo",
                    ray_address=ray_head,
                    retries=0,
                    dpo={**DPO, "save_steps": 1},
                    **ROUND,
                )
            )
    assert read_pointer(store, "gated").round == 2 and read_pointer(store, "gated").model_uri == first["model_uri"]


def test_compare_runs_two_variants_at_once_and_a_rerun_skips_both(ray_head, tiny_sft, tmp_path):
    store = str(tmp_path / "store")
    params = dict(
        run_name="cmp",
        store=store,
        recipe="tiny",
        ray_address=ray_head,
        stage="dpo",
        shared={"pretrain": str(tiny_sft), **DPO},
        evaluate=EVAL,
        promote_to="champion",
        variants={"lr-1e-9": {"learning_rate": 1e-9}, "lr-0.05": {"learning_rate": 0.05}},
    )
    result = asyncio.run(compare_flow(**params))
    metrics = {name: v["metrics"]["accuracy"] for name, v in result["variants"].items()}
    assert result["winner"] == "lr-1e-9" and metrics["lr-1e-9"] > metrics["lr-0.05"]
    assert read_pointer(store, "champion").model_uri == result["variants"]["lr-1e-9"]["model_uri"]
    # the two DPO jobs ran at the same time on the 2-CPU cluster (one CPU rank each)
    jobs = [j for j in ray_jobs(ray_head, "cmp") if (j.metadata or {}).get("alignflow_stage") == "dpo"]
    assert len(jobs) == 2
    assert max(j.start_time for j in jobs) < min(j.end_time for j in jobs)

    again = asyncio.run(compare_flow(**{**params, "promote_to": None}, return_state=True))
    assert all(v["skipped"] for v in again.result()["variants"].values())
    assert len(ray_jobs(ray_head, "cmp")) == 4  # 2 trainings + 2 evaluations, none rerun
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async def comparison() -> str:
        async with get_client() as client:
            found = await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["cmp-comparison"]))
            )
        return str(found[-1].data)

    table = asyncio.run(comparison())
    assert "lr-1e-9" in table and "lr-0.05" in table and "accuracy" in table
