"""The working commands the bad-input corpus changes (tests/bad_input_cases_*.py): a CLI's argv on the tiny
world's data (the tiny vision world's for VSFT and VPPO) that would run as it is, with @MODEL@, @OUT@, @WORK@ and
@VLM@ filled in by tests/test_bad_input.py."""

from __future__ import annotations

from alignment.tiny_world.paths import tiny_dir, tiny_vision_dir

T = str(tiny_dir())
V = str(tiny_vision_dir())
# argument lists: one a statement, laid out as the corpus's table is
# fmt: off
SFT = ["--pretrain", "@MODEL@", "--dataset", f"{T}/sft/train.jsonl", "--input_key", "input", "--output_key", "output",
       "--save_path", "@OUT@", "--max_len", "64", "--train_batch_size", "8", "--micro_train_batch_size", "8"]
PAIRS = ["--pretrain", "@MODEL@", "--dataset", f"{T}/preference/train.jsonl", "--prompt_key", "prompt",
         "--save_path", "@OUT@", "--max_len", "64", "--train_batch_size", "8", "--micro_train_batch_size", "8"]
KTO = ["--pretrain", "@MODEL@", "--dataset", f"{T}/unpaired/train.jsonl", "--input_key", "input", "--output_key",
       "output", "--save_path", "@OUT@", "--max_len", "64", "--train_batch_size", "8", "--micro_train_batch_size", "8"]
PPO = ["--pretrain", "@MODEL@", "--prompt_data", f"{T}/prompts/train.jsonl", "--input_key", "input", "--label_key",
       "label", "--remote_rm_url", f"{T}/reward_func.py", "--save_path", "@OUT@", "--rollout_batch_size", "8",
       "--micro_rollout_batch_size", "8", "--train_batch_size", "8", "--micro_train_batch_size", "8"]
PRM = ["--pretrain", "@MODEL@", "--dataset", f"{T}/sft/train.jsonl", "--save_path", "@OUT@", "--max_len", "64",
       "--train_batch_size", "8", "--micro_train_batch_size", "8"]
GEN = ["--pretrain", "@MODEL@", "--dataset", f"{T}/prompts/test.jsonl", "--input_key", "input",
       "--output_path", "@WORK@/gen"]
EVAL = ["--pretrain", "@MODEL@", "--dataset", f"{T}/prompts/test.jsonl", "--output_path", "@WORK@/eval"]
NO_BUCKET = "s3://alignflow-no-such-bucket"
VSFT = ["--pretrain", "@VLM@", "--dataset", f"{V}/sft/train.jsonl", "--input_key", "input", "--output_key", "output",
        "--apply_chat_template", "--max_images_per_prompt", "1", "--save_path", "@OUT@", "--max_len", "128",
        "--train_batch_size", "8", "--micro_train_batch_size", "8"]
VPPO = ["--pretrain", "@VLM@", "--prompt_data", f"{V}/prompts/train.jsonl", "--input_key", "input", "--label_key",
        "label", "--apply_chat_template", "--max_images_per_prompt", "1", "--advantage_estimator", "group_norm",
        "--n_samples_per_prompt", "2", "--save_path", "@OUT@", "--rollout_batch_size", "8",
        "--micro_rollout_batch_size", "8", "--train_batch_size", "16", "--micro_train_batch_size", "8"]
# fmt: on
