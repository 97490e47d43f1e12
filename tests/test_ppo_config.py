"""The PPO config: OpenRLHF's flags parse, and bad combinations are one clear error before anything loads."""

from __future__ import annotations

import pytest

from alignment.config import ConfigError, parse_args
from alignment.config.algorithm import ADVANTAGE_ESTIMATORS
from alignment.config.ppo import PPOConfig

BASE = ["--pretrain", "sft", "--reward_pretrain", "rm", "--prompt_data", "prompts.jsonl"]


def parse(*extra: str) -> PPOConfig:
    return parse_args(PPOConfig, [*BASE, *extra])


def test_every_estimator_has_its_math():
    from alignment.losses.advantages import GROUP_BASELINES
    from alignment.losses.estimators import ESTIMATORS

    assert set(GROUP_BASELINES) == {n for n, e in ESTIMATORS.items() if e.group}
    assert ADVANTAGE_ESTIMATORS == tuple(ESTIMATORS)


def test_normalize_reward_without_a_reward_model():
    """PPO normalises a reward file's, server's or agent's rewards by running moments (alignment/losses/reward_norm.py);
    batch inference has no running statistics to use, so there the flag is still refused."""
    from alignment.config import BatchInferenceConfig

    cfg = ["--pretrain", "sft", "--prompt_data", "prompts.jsonl", "--remote_rm_url", "reward.py", "--normalize_reward"]
    assert parse_args(PPOConfig, cfg).normalize_reward
    with pytest.raises(
        ConfigError, match="--normalize_reward normalises reward models' scores .* drop --normalize_reward"
    ):
        parse_args(
            BatchInferenceConfig,
            [
                "--pretrain",
                "sft",
                "--dataset",
                "p.jsonl",
                "--output_path",
                "o",
                "--eval_task",
                "rm",
                "--output_key",
                "output",
                "--remote_rm_url",
                "reward.py",
                "--normalize_reward",
            ],
        )


def test_loss_aggregation_defaults_to_the_estimators_own():
    assert (
        parse("--advantage_estimator", "dr_grpo", "--n_samples_per_prompt", "4").loss_agg() == "seq-mean-token-sum-norm"
    )
    assert parse("--advantage_estimator", "group_norm", "--n_samples_per_prompt", "4").loss_agg() == "token-mean"
    assert parse("--loss_agg_mode", "seq-mean-token-mean").loss_agg() == "seq-mean-token-mean"
    with pytest.raises(ConfigError, match="--loss_agg_mode: invalid choice: 'token-sum'"):
        parse("--loss_agg_mode", "token-sum")


def test_openrlhf_readme_flags_parse():
    cfg = parse(
        "--ref_num_nodes",
        "1",
        "--ref_num_gpus_per_node",
        "2",
        "--reward_num_nodes",
        "1",
        "--reward_num_gpus_per_node",
        "2",
        "--critic_num_nodes",
        "1",
        "--critic_num_gpus_per_node",
        "2",
        "--actor_num_nodes",
        "1",
        "--actor_num_gpus_per_node",
        "2",
        "--vllm_num_engines",
        "2",
        "--vllm_tensor_parallel_size",
        "2",
        "--colocate_critic_reward",
        "--colocate_actor_ref",
        "--ref_reward_offload",
        "--micro_train_batch_size",
        "8",
        "--train_batch_size",
        "128",
        "--micro_rollout_batch_size",
        "16",
        "--rollout_batch_size",
        "1024",
        "--max_samples",
        "100000",
        "--max_epochs",
        "1",
        "--prompt_max_len",
        "1024",
        "--generate_max_len",
        "1024",
        "--zero_stage",
        "3",
        "--bf16",
        "--actor_learning_rate",
        "5e-7",
        "--critic_learning_rate",
        "9e-6",
        "--init_kl_coef",
        "0.01",
        "--input_key",
        "context_messages",
        "--apply_chat_template",
        "--normalize_reward",
        "--adam_offload",
        "--flash_attn",
        "--gradient_checkpointing",
    )
    assert cfg.vllm_num_engines == 2 and cfg.colocate_actor_ref and cfg.actor_learning_rate == 5e-7
    assert cfg.advantage_estimator == "gae" and cfg.normalize_reward


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--advantage_estimator", "group_norm"], "--n_samples_per_prompt 1 gives nothing to compare"),
        (["--advantage_estimator", "rloo", "--n_samples_per_prompt", "1"], "use >= 2"),
        (
            ["--colocate_all_models", "--critic_num_gpus_per_node", "2"],
            "--colocate_all_models: actor has 1x1 ranks but critic has 1x2",
        ),
        (["--colocate_actor_ref", "--ref_num_nodes", "2"], "--colocate_actor_ref: actor has 1x1 ranks but ref has 2x1"),
        (["--dual_clip", "0.5"], "--dual_clip 0.5: must be > 1"),
        (["--reward_weights", "1,2"], "give one number per --reward_pretrain model (1)"),
        (["--advantage_estimator", "rloo", "--n_samples_per_prompt", "4", "--critic_pretrain", "c"], "uses no critic"),
        (["--zero_stage", "0", "--adam_offload"], "--adam_offload with --zero_stage 0: DeepSpeed offloads optimizer"),
        (["--learning_rate", "3e-4"], "PPO trains each model at its own rate; pass --actor_learning_rate"),
    ],
)
def test_bad_combinations_are_one_clear_error(args, needle):
    with pytest.raises(ConfigError) as err:
        parse(*args)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_group_estimator_with_samples_is_fine():
    assert parse("--advantage_estimator", "group_norm", "--n_samples_per_prompt", "4").n_samples_per_prompt == 4


def test_a_reward_is_required():
    with pytest.raises(ConfigError, match="no reward: pass --reward_pretrain"):
        parse_args(PPOConfig, ["--pretrain", "sft", "--prompt_data", "p.jsonl"])


def test_a_fresh_ppo_run_starts_its_metrics_file_empty(tmp_path):
    """A second run into the same --save_path (not resuming) must not append to the first's rows."""
    import json
    from types import SimpleNamespace

    from alignment.ppo.loop import PPOState, run_iterations
    from alignment.training.tracking import MetricsLogger

    cfg = PPOConfig(pretrain="x", prompt_data="y", logging_steps=1, save_steps=-1)
    for run in range(2):
        logger = MetricsLogger(cfg, tmp_path, True, 3, "ppo")
        ppo = SimpleNamespace(
            step=lambda it: {"reward": float(run)},
            restore=lambda state: None,
            snapshot=lambda it, history: PPOState(it, 0.0, history),
        )
        run_iterations(cfg, 3, ppo, logger, lambda s: None, None)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["train/reward"]) for r in rows] == [(1, 1.0), (2, 1.0), (3, 1.0)]


@pytest.mark.parametrize(
    "flag", [["--actor_num_gpus_per_node", "2"], ["--colocate_all_models"], ["--vllm_num_engines", "1"]]
)
def test_train_ppo_refuses_ray_only_flags_before_any_model_loads(flag, tmp_path):
    from alignment.cli import train_ppo

    args = [
        "--pretrain",
        str(tmp_path / "no-model"),
        "--prompt_data",
        str(tmp_path / "no.jsonl"),
        "--remote_rm_url",
        "http://127.0.0.1:1/score",
        "--save_path",
        str(tmp_path / "out"),
        *flag,
    ]
    with pytest.raises(ConfigError, match=f"{flag[0]}.*train_ppo_ray"):
        train_ppo.main(args)  # the paths do not exist: refused before anything reads them


def test_colocation_checks_only_the_groups_a_run_places():
    """OpenRLHF's GRPO/DAPO lines at their own sizes: actor and ref 1x8 with --colocate_all_models, the critic's
    sizes left at their defaults — no critic is placed (group_norm), so they share nothing. With GAE it is."""
    line = [
        "--pretrain",
        "m",
        "--prompt_data",
        "p",
        "--remote_rm_url",
        "r.py",
        "--colocate_all_models",
        "--actor_num_nodes",
        "1",
        "--actor_num_gpus_per_node",
        "8",
        "--ref_num_nodes",
        "1",
        "--ref_num_gpus_per_node",
        "8",
        "--n_samples_per_prompt",
        "8",
    ]
    cfg = parse_args(PPOConfig, [*line, "--advantage_estimator", "group_norm"])
    assert cfg.placed_roles() == ["actor", "ref"]
    with pytest.raises(ConfigError, match="--colocate_all_models: actor has 1x8 ranks but critic has 1x1"):
        parse_args(PPOConfig, [*line, "--advantage_estimator", "gae"])


@pytest.mark.parametrize("estimator", ["reinforce", "gae", "group_norm"])
def test_dynamic_filtering_takes_any_estimator_with_several_samples_a_prompt(estimator):
    """As OpenRLHF: the filter reads one prompt's samples' scores, so REINFORCE++ and GAE may use it too; one
    sample a prompt leaves nothing to filter on."""
    flags = ["--advantage_estimator", estimator, "--dynamic_filtering", "--remote_rm_url", "reward.py"]
    assert parse(*flags, "--n_samples_per_prompt", "8").dynamic_filtering
    if estimator != "group_norm":  # a group estimator refuses one sample first, with its own line
        with pytest.raises(ConfigError, match="--dynamic_filtering keeps the prompts .* use >= 2"):
            parse(*flags, "--n_samples_per_prompt", "1")


@pytest.mark.parametrize(
    "flag", ["--vllm_enable_is_correction", "--enable_vllm_is_correction", "--algo.advantage.is_correction_enable"]
)
def test_is_correction_by_each_of_its_names(flag):
    """The older scripts' --vllm_enable_is_correction, the flat and the dotted name: one switch (with a vLLM engine,
    the only one whose samples it weighs)."""
    assert parse(flag, "--vllm_num_engines", "1").algo.advantage.is_correction_enable
