"""PPO without Ray (`alignment.cli.train_ppo`) on the tiny world as its tests give it: the prompts' flags, small
batches (GROUP_SMALL: group_norm on 4 samples a prompt, as the agent tests train), the rule reward."""

from __future__ import annotations

from alignment.tiny_world.paths import tiny_dir

PROMPTS = [
    "--prompt_data",
    f"json@{tiny_dir() / 'prompts'}",
    "--input_key",
    "context_messages",
    "--label_key",
    "label",
    "--apply_chat_template",
    "--generate_max_len",
    "16",
    "--logging_steps",
    "1",
]
SMALL = [
    "--rollout_batch_size",
    "16",
    "--micro_rollout_batch_size",
    "16",
    "--train_batch_size",
    "32",
    "--micro_train_batch_size",
    "16",
    "--max_samples",
    "48",
    "--actor_learning_rate",
    "1e-5",
]
RULE = ["--remote_rm_url", "alignment/tiny_world/reward.py"]
# group_norm, 4 samples a prompt, 16 prompts: two iterations of one optimizer step (the agent tests')
GROUP_SMALL = [
    "--advantage_estimator",
    "group_norm",
    "--n_samples_per_prompt",
    "4",
    "--rollout_batch_size",
    "8",
    "--micro_rollout_batch_size",
    "32",
    "--train_batch_size",
    "32",
    "--micro_train_batch_size",
    "16",
    "--max_samples",
    "16",
    "--actor_learning_rate",
    "1e-5",
    "--init_kl_coef",
    "0",
]
