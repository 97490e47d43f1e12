"""PPO on Ray (`alignment.cli.train_ppo_ray`) submitted with `ray job submit` to the session's
local Ray head (2 CPUs, loopback): model groups as Ray actors in placement groups, each group its
own gloo process group, the single controller in the job's driver."""

from __future__ import annotations

import os

import pytest
from safetensors.torch import load_file

from tests.conftest import REPO, metric_rows
from tests.ppo_ray_jobs import PROMPTS, ray_job

pytestmark = pytest.mark.integration


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
    # a bundle's share of the node's 2 CPUs as Ray counts them, but no more threads than the cores the ranks may
    # run on (under xdist each worker, and the Ray head it started, is pinned to one core)
    assert f"actor rank 0/1 ready ({min(2, len(os.sched_getaffinity(0)))} threads)" in logs, logs[-3000:]
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


# make test-extended: CI proves Ray = train_ppo by the tensor-parallel test below and PPO's resume on Ray by the
# deployment's flow-run retry
@pytest.mark.extended
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
