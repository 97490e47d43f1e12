"""OpenRLHF's two dialects: the flat flags of <= 0.9 and the dotted, grouped flags of 0.10.2+ parse to the
same config on every CLI; one field under both names is refused in one line. One real SFT run on the
tiny model with a dotted command line. (Nested YAML files and flow parameters: test_nested_config.py.)"""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from alignment.config import ConfigError, DPOConfig, KTOConfig, PPOConfig, RMConfig, SFTConfig, parse_args
from alignment.config.cli import build_parser
from alignment.config.dotted import spellings
from alignment.config.inference import BatchInferenceConfig
from alignment.config.serving import ChatConfig, ServeRMConfig
from alignment.tiny_world.paths import tiny_dir
from tests.conftest import REPO, losses, python_env, run_module

CLI_CONFIG = {
    "train_sft": SFTConfig,
    "train_rm": RMConfig,
    "train_dpo": DPOConfig,
    "train_kto": KTOConfig,
    "train_ppo": PPOConfig,
    "train_ppo_ray": PPOConfig,
    "batch_inference": BatchInferenceConfig,
    "interactive_chat": ChatConfig,
    "serve_rm": ServeRMConfig,
}

# The README command lines (sizes and paths shrunk), then the same run in OpenRLHF's dotted names.
SFT = (
    "--max_len 512 --dataset D --input_key question --output_key response --train_batch_size 8 "
    "--micro_train_batch_size 2 --max_samples 500 --pretrain M --save_path {out} --save_steps -1 --logging_steps 1 "
    "--eval_steps -1 --zero_stage 2 --max_epochs 1 --packing_samples --bf16 --flash_attn --learning_rate 5e-6 "
    "--gradient_checkpointing --use_wandb offline",
    "--data.max_len 512 --data.dataset D --data.input_key question --data.output_key response --train.batch_size 8 "
    "--train.micro_batch_size 2 --data.max_samples 500 --model.model_name_or_path M --ckpt.output_dir {out} "
    "--ckpt.save_steps -1 --logger.logging_steps 1 --eval.steps -1 --ds.zero_stage 2 --train.max_epochs 1 "
    "--ds.packing_samples --ds.param_dtype bf16 --ds.attn_implementation flash_attention_2 --adam.lr 5e-6 "
    "--model.gradient_checkpointing_enable --logger.wandb.key offline",
)
RM = (
    "--save_path {out} --save_steps -1 --logging_steps 1 --eval_steps -1 --train_batch_size 8 "
    "--micro_train_batch_size 1 --pretrain M --bf16 --max_epochs 1 --max_len 512 --zero_stage 3 --learning_rate 9e-6 "
    "--dataset D --apply_chat_template --chosen_key chosen --rejected_key rejected --flash_attn --packing_samples "
    "--gradient_checkpointing --margin_loss --value_head_prefix value_head",
    "--ckpt.output_dir {out} --ckpt.save_steps -1 --logger.logging_steps 1 --eval.steps -1 --train.batch_size 8 "
    "--train.micro_batch_size 1 --model.model_name_or_path M --ds.param_dtype bf16 --train.max_epochs 1 "
    "--data.max_len 512 --ds.zero_stage 3 --adam.lr 9e-6 --data.dataset D --data.apply_chat_template "
    "--data.chosen_key chosen --data.rejected_key rejected --ds.attn_implementation flash_attention_2 "
    "--ds.packing_samples --model.gradient_checkpointing_enable --model.margin_loss_enable "
    "--ds.value_head_prefix value_head",
)
DPO = (
    "--pretrain M --ref_pretrain R --dataset D --beta 0.1 --learning_rate 5e-7 --save_path {out} --ipo "
    "--nll_loss_coef 0.2 --ref_offload --lora_rank 8 --lora_alpha 16 --target_modules q_proj v_proj --l2 0.01",
    "--model.model_name_or_path M --ref.model_name_or_path R --data.dataset D --model.beta 0.1 --adam.lr 5e-7 "
    "--ckpt.output_dir {out} --model.ipo_enable --model.nll_loss_coef 0.2 --ref.offload --ds.lora.rank 8 "
    "--ds.lora.alpha 16 --ds.lora.target_modules q_proj v_proj --adam.weight_decay 0.01",
)
KTO = (
    "--pretrain M --dataset D --output_key completion --label_key label --desirable_loss_weight 1.3 "
    "--undesirable_loss_weight 0.7 --micro_train_batch_size 2 --save_path {out}",
    "--model.model_name_or_path M --data.dataset D --data.output_key completion --data.label_key label "
    "--model.desirable_loss_weight 1.3 --model.undesirable_loss_weight 0.7 --train.micro_batch_size 2 "
    "--ckpt.output_dir {out}",
)
PPO = (
    "--pretrain M --reward_pretrain R --save_path {out} --save_steps -1 --logging_steps 1 --eval_steps -1 "
    "--micro_train_batch_size 2 --train_batch_size 8 --micro_rollout_batch_size 4 --rollout_batch_size 16 "
    "--max_epochs 1 --prompt_max_len 256 --generate_max_len 256 --zero_stage 2 --bf16 --actor_learning_rate 5e-7 "
    "--critic_learning_rate 9e-6 --init_kl_coef 0.01 --prompt_data P --input_key context_messages "
    "--apply_chat_template --max_samples 100 --normalize_reward --adam_offload --flash_attn --gradient_checkpointing",
    "--actor.model_name_or_path M --reward.model_name_or_path R --ckpt.output_dir {out} --ckpt.save_steps -1 "
    "--logger.logging_steps 1 --eval.steps -1 --train.micro_batch_size 2 --train.batch_size 8 "
    "--rollout.micro_batch_size 4 --rollout.batch_size 16 --train.max_epochs 1 --data.prompt_max_len 256 "
    "--rollout.max_new_tokens 256 --ds.zero_stage 2 --ds.param_dtype bf16 --actor.adam.lr 5e-7 "
    "--critic.adam.lr 9e-6 --algo.kl.init_coef 0.01 --data.prompt_dataset P --data.input_key context_messages "
    "--data.apply_chat_template --data.max_samples 100 --reward.normalize_enable --ds.adam_offload "
    "--ds.attn_implementation flash_attention_2 --actor.gradient_checkpointing_enable",
)
PPO_RAY = (
    "--ref_num_nodes 1 --ref_num_gpus_per_node 2 --reward_num_nodes 1 --reward_num_gpus_per_node 2 "
    "--critic_num_nodes 1 --critic_num_gpus_per_node 2 --actor_num_nodes 1 --actor_num_gpus_per_node 2 "
    "--vllm_num_engines 2 --vllm_tensor_parallel_size 1 --colocate_critic_reward --colocate_actor_ref "
    "--init_kl_coef 1e-3 --gamma 1.0 --use_kl_loss --kl_estimator k3 --advantage_estimator group_norm "
    "--dynamic_filtering --dynamic_filtering_reward_range 0 1 --eps_clip_low_high 0.2 0.27 --pretrain M "
    "--remote_rm_url reward_func.py --save_path {out} --ckpt_path {out}_ckpt --save_steps 20 --save_hf_ckpt "
    "--n_samples_per_prompt 8 --prompt_data P --label_key label --vllm_sync_backend nccl --enforce_eager "
    "--vllm_gpu_memory_utilization 0.6 --enable_vllm_is_correction --packing_samples --l2 0.01 --top_p 0.98",
    "--ref.num_nodes 1 --ref.num_gpus_per_node 2 --reward.num_nodes 1 --reward.num_gpus_per_node 2 "
    "--critic.num_nodes 1 --critic.num_gpus_per_node 2 --actor.num_nodes 1 --actor.num_gpus_per_node 2 "
    "--vllm.num_engines 2 --vllm.tensor_parallel_size 1 --train.colocate_critic_reward --train.colocate_actor_ref "
    "--algo.kl.init_coef 1e-3 --algo.advantage.gamma 1.0 --algo.kl.use_loss --algo.kl.estimator k3 "
    "--algo.advantage.estimator group_norm --algo.dynamic_filtering_enable --algo.dynamic_filtering_range 0 1 "
    "--actor.eps_clip_low_high 0.2 0.27 --actor.model_name_or_path M --reward.remote_url reward_func.py "
    "--ckpt.output_dir {out} --ckpt.path {out}_ckpt --ckpt.save_steps 20 --ckpt.save_hf "
    "--rollout.n_samples_per_prompt 8 --data.prompt_dataset P --data.label_key label --vllm.sync_backend nccl "
    "--vllm.enforce_eager --vllm.gpu_memory_utilization 0.6 --algo.advantage.is_correction_enable "
    "--ds.packing_samples --actor.adam.weight_decay 0.01 --rollout.top_p 0.98",
)
BATCH = (
    "--eval_task generate --pretrain M --dataset D --input_key prompt --max_new_tokens 64 --prompt_max_len 128 "
    "--best_of_n 4 --temperature 0.7 --top_p 0.9 --reward_pretrain R --post_processor rs --output_path {out}",
    "--eval_task generate --model.model_name_or_path M --data.dataset D --data.input_key prompt "
    "--generate.max_new_tokens 64 --data.prompt_max_len 128 --best_of_n 4 --generate.temperature 0.7 "
    "--generate.top_p 0.9 --reward.model_name_or_path R --post_processor rs --output_path {out}",
)
CHAT = (
    "--pretrain M --apply_chat_template --max_new_tokens 64 --temperature 0.7 --top_p 0.8 --max_len 512",
    "--model.model_name_or_path M --data.apply_chat_template --generate.max_new_tokens 64 "
    "--generate.temperature 0.7 --generate.top_p 0.8 --data.max_len 512",
)
SERVE = (
    "--reward_pretrain R --normalize_reward --value_head_prefix score --port 0",
    "--reward.model_name_or_path R --reward.normalize_enable --ds.value_head_prefix score --port 0",
)
LINES = {
    "train_sft": SFT,
    "train_rm": RM,
    "train_dpo": DPO,
    "train_kto": KTO,
    "train_ppo": PPO,
    "train_ppo_ray": PPO_RAY,
    "batch_inference": BATCH,
    "interactive_chat": CHAT,
    "serve_rm": SERVE,
}


def argv(line: str, tmp_path) -> list[str]:
    return shlex.split(line.format(out=tmp_path / "out"))


def schema_clis() -> dict[str, type]:
    """{cli: its config class} for every `python -m alignment.cli.X` built from a schema (parse_args(XConfig))."""
    import importlib
    import re

    out = {}
    for path in sorted((REPO / "alignment" / "cli").glob("*.py")):
        m = re.search(r"parse_args\((\w+Config)\b", path.read_text())
        if m:
            module = importlib.import_module(f"alignment.cli.{path.stem}")
            out[path.stem] = getattr(module, m.group(1))
    return out


def test_every_cli_built_from_a_schema_lists_its_dotted_names():
    """Every schema CLI, those added later too: its dotted names resolve (no two fields share one) and
    --help shows them; the CLIs that have OpenRLHF command lines have a dotted/flat pair below."""
    clis = schema_clis()
    assert set(LINES) <= set(clis) and all(CLI_CONFIG[c] is clis[c] for c in LINES)
    for cli, cls in clis.items():
        text = build_parser(cls).format_help()
        missing = [name for name in spellings(cls) if f"--{name}" not in text]
        assert not missing, f"{cli}: --help lacks {missing}"


@pytest.mark.parametrize("cli", sorted(LINES))
def test_dotted_and_flat_command_lines_parse_to_one_config(cli, tmp_path):
    flat, dotted = LINES[cli]
    cls = CLI_CONFIG[cli]
    a, b = parse_args(cls, argv(flat, tmp_path)), parse_args(cls, argv(dotted, tmp_path))
    assert a == b
    assert "." in dotted and not any("." in f for f in argv(flat, tmp_path) if f.startswith("--"))


@pytest.mark.parametrize("cls", sorted(set(CLI_CONFIG.values()), key=lambda c: c.__name__))
def test_help_lists_the_dotted_name_with_the_flat_one(cls):
    text = " ".join(build_parser(cls).format_help().split())
    assert spellings(cls)  # every stage has dotted names
    for name, spelling in spellings(cls).items():
        if spelling.values is None:  # one option: dotted first, the flat name as its alias
            assert f"--{name}" in text and f"--{spelling.field}" in text
        else:
            assert f"OpenRLHF's dotted setting for --{spelling.field}" in text


@pytest.mark.parametrize(
    "cli, args, first, second",
    [
        ("train_sft", "--zero_stage 2 --ds.zero_stage 3", "--zero_stage", "--ds.zero_stage"),
        ("train_sft", "--ds.param_dtype bf16 --bf16", "--ds.param_dtype", "--bf16"),
        (
            "train_ppo_ray",
            "--actor.adam.betas 0.9 0.95 --critic.adam.betas 0.9 0.99",
            "--actor.adam.betas",
            "--critic.adam.betas",
        ),
        ("train_ppo_ray", "--actor_num_nodes 1 --actor.num_nodes 1", "--actor_num_nodes", "--actor.num_nodes"),
    ],
)
def test_one_field_under_two_names_is_refused_naming_both(cli, args, first, second, tmp_path):
    line = f"{LINES[cli][0]} {args}"
    with pytest.raises(ConfigError) as e:
        parse_args(CLI_CONFIG[cli], argv(line, tmp_path))
    assert first in str(e.value) and second in str(e.value) and "\n" not in str(e.value)


def test_mixed_line_exits_2_with_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "alignment.cli.train_sft", *argv(SFT[1], tmp_path), "--zero_stage", "2"],
        cwd=REPO,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and "--ds.zero_stage" in line and "--zero_stage" in line, proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        ("--ds.param_dtype fp16", "fp16"),  # a setting alignflow does not build
        ("--train.micro_bach_size 2", "--train.micro_batch_size"),  # a typo: the closest dotted name
        ("--train.dynamic_batch_enable", "PPO family"),  # an OpenRLHF refusal, dotted
    ],
)
def test_bad_dotted_flags_fail_in_one_line(args, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        parse_args(SFTConfig, argv(f"{SFT[0]} {args}", tmp_path))


def test_a_dotted_command_line_trains(tiny_base, tmp_path):
    """The one real run: train_sft on the tiny model, every flag in OpenRLHF's dotted spelling."""
    out = tmp_path / "sft"
    run_module(
        "alignment.cli.train_sft",
        [
            "--model.model_name_or_path",
            str(tiny_base),
            "--data.dataset",
            f"json@{tiny_dir() / 'sft'}",
            "--data.input_key",
            "context_messages",
            "--data.apply_chat_template",
            "--data.multiturn",
            "--data.max_len",
            "64",
            "--data.max_samples",
            "64",
            "--train.batch_size",
            "8",
            "--train.micro_batch_size",
            "8",
            "--train.seed",
            "7",
            "--adam.lr",
            "2e-3",
            "--ds.zero_stage",
            "0",
            "--logger.logging_steps",
            "1",
            "--ckpt.output_dir",
            str(out),
            "--ckpt.save_steps",
            "-1",
            "--max_steps",
            "3",
        ],
    )
    curve = losses(out)
    assert len(curve) == 3 and all(loss > 0 for loss in curve), curve
    assert (out / "MANIFEST.json").exists()


@pytest.mark.parametrize(
    "args, moved, key",
    [
        (["--logger.wandb.key", "k3y"], ["--logger.wandb.key", "env"], "k3y"),
        (["--logger.wandb.key=k3y"], ["--logger.wandb.key=env"], "k3y"),
        (["--logger.wandb.k", "k3y"], ["--logger.wandb.k", "env"], "k3y"),  # argparse's prefix matching
        (["--logger.wandb.key", "offline"], ["--logger.wandb.key", "offline"], None),
        (["--logger.wandb.project", "p"], ["--logger.wandb.project", "p"], None),
    ],
)
def test_a_dotted_wandb_key_leaves_the_command_line_too(args, moved, key):
    from alignment.cli.common import argv_without_wandb_key

    assert argv_without_wandb_key(args) == (moved, key)


def test_the_agent_file_takes_openrlhfs_dotted_name():
    """OpenRLHF >= 0.10.2 spells it --train.agent_func_path."""
    from alignment.config import PPOConfig, parse_args

    cfg = parse_args(
        PPOConfig,
        ["--actor.model_name_or_path", "m", "--data.prompt_dataset", "p", "--train.agent_func_path", "env.py"],
    )
    assert cfg.agent_func_path == "env.py"
