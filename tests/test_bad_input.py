"""Bad input a user really types: every case is ONE `error:` line on stderr naming the flag or file,
exit status 2, no traceback or argparse usage block, no model loaded, and the committed model at
--save_path left byte-identical (issue 21, point 4).

Argparse-level cases and two representative deeper ones run as real `python -m` subprocesses. The
rest run in one driver subprocess (`_drive`) that calls each CLI's `run_main` with argv: 40 separate
torch/DeepSpeed start-ups would take minutes on 2 cores. The driver fails a case loudly if it reaches
`PreTrainedModel.from_pretrained` or `ray.init` (the model loads / Ray starts); the real subprocesses
are checked for transformers' "Loading weights" bar instead.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alignment.tiny_world.paths import tiny_dir, tiny_vision_dir
from tests.bad_input_files import write_bad_files, write_vision_files
from tests.conftest import python_env
from tests.fixtures_s3 import PLANTED_SECRET
from tests.mounts import read_only_dir

pytestmark = pytest.mark.integration

T = str(tiny_dir())
# argument lists and the corpus: one case a line reads as a table
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
V = str(tiny_vision_dir())
VSFT = ["--pretrain", "@VLM@", "--dataset", f"{V}/sft/train.jsonl", "--input_key", "input", "--output_key", "output",
        "--apply_chat_template", "--max_images_per_prompt", "1", "--save_path", "@OUT@", "--max_len", "128",
        "--train_batch_size", "8", "--micro_train_batch_size", "8"]
VPPO = ["--pretrain", "@VLM@", "--prompt_data", f"{V}/prompts/train.jsonl", "--input_key", "input", "--label_key",
        "label", "--apply_chat_template", "--max_images_per_prompt", "1", "--advantage_estimator", "group_norm",
        "--n_samples_per_prompt", "2", "--save_path", "@OUT@", "--rollout_batch_size", "8",
        "--micro_rollout_batch_size", "8", "--train_batch_size", "16", "--micro_train_batch_size", "8"]

# (name, CLI, argv, what the one line must contain, run as a real subprocess)
CASES = [
    # argparse: an unknown flag, a value of the wrong type, a choice that does not exist
    ("sft_unknown_flag", "train_sft", [*SFT, "--foo"], "unrecognized argument --foo", True),
    ("sft_flag_typo", "train_sft", [*SFT, "--leraning_rate", "1e-5"], "did you mean --learning_rate", True),
    ("sft_zero_stage_5", "train_sft", [*SFT, "--zero_stage", "5"], "--zero_stage: invalid choice: 5", True),
    ("ppo_ray_unknown_estimator", "train_ppo_ray", [*PPO, "--advantage_estimator", "ppo2"],
     "--advantage_estimator: invalid choice: 'ppo2'", True),
    ("batch_unknown_eval_task", "batch_inference", [*GEN, "--eval_task", "classify"],
     "--eval_task: invalid choice: 'classify'", True),
    ("evaluate_generate_without_reward", "evaluate", EVAL, "--eval_task generate scores the responses: add "
     "--remote_rm_url reward_func.py|URL (with --label_key), --reward_pretrain RM_DIR, or only --label_key", False),
    ("evaluate_perplexity_without_responses", "evaluate", [*EVAL, "--eval_task", "perplexity"],
     "--eval_task perplexity needs the responses: set --output_key", False),
    ("evaluate_csft_on_pairs", "evaluate", [*EVAL, "--eval_task", "pairs", "--enable_csft"],
     "--eval_task pairs generates nothing: drop one of them", False),
    ("rm_lr_string", "train_rm", [*PAIRS, "--learning_rate", "fast"], "--learning_rate: invalid float value", True),
    ("dpo_bool_string", "train_dpo", [*PAIRS, "--ipo", "maybe"], "--ipo: expected true/false, got 'maybe'", True),
    ("kto_unknown_scheduler", "train_kto", [*KTO, "--lr_scheduler", "exp"], "--lr_scheduler: invalid choice", False),
    ("sft_zero_stage_word", "train_sft", [*SFT, "--zero_stage", "two"], "--zero_stage: invalid int value", False),
    ("rm_unknown_loss", "train_rm", [*PAIRS, "--loss", "hinge"], "--loss: invalid choice: 'hinge'", False),
    ("sft_bool_flag_number", "train_sft", [*SFT, "--packing_samples", "2"], "--packing_samples: expected true/false", False),
    ("sft_target_modules_empty", "train_sft", [*SFT, "--target_modules"], "--target_modules: expected at least one", False),
    ("sft_missing_config_file", "train_sft", [*SFT, "--config", "@WORK@/nope.yaml"], "nope.yaml: file not found", False),
    ("sft_config_unknown_key", "train_sft", [*SFT, "--config", "@BAD@/typo.yaml"], "unknown option 'lerning_rate'", False),
    # values that parse but make no sense
    ("sft_negative_micro_batch", "train_sft", [*SFT, "--micro_train_batch_size", "-1"], "--micro_train_batch_size -1", False),
    ("sft_negative_train_batch", "train_sft", [*SFT, "--train_batch_size", "-8"], "--train_batch_size -8", False),
    ("sft_batches_not_divisible", "train_sft", [*SFT, "--train_batch_size", "10", "--micro_train_batch_size", "4"],
     "--train_batch_size 10 is not divisible", False),
    ("sft_max_len_0", "train_sft", [*SFT, "--max_len", "0"], "--max_len 0", False),
    ("sft_max_samples_0", "train_sft", [*SFT, "--max_samples", "0"], "--max_samples 0", False),
    ("sft_warmup_ratio", "train_sft", [*SFT, "--lr_warmup_ratio", "1.5"], "--lr_warmup_ratio 1.5", False),
    ("sft_lora_dropout", "train_sft", [*SFT, "--lora_rank", "8", "--lora_dropout", "1.5"], "--lora_dropout 1.5", False),
    ("sft_unknown_lora_target", "train_sft", [*SFT, "--lora_rank", "8", "--target_modules", "qq_proj"],
     "--target_modules qq_proj", False),
    ("sft_probs_mismatch", "train_sft", [*SFT, "--dataset_probs", "0.5,0.5"], "--dataset_probs has 2 values", False),
    ("sft_template_no_slot", "train_sft", [*SFT, "--input_template", "User: "], "--input_template 'User: '", False),
    ("sft_multiturn_no_template", "train_sft", [*SFT, "--multiturn"], "--multiturn needs --apply_chat_template", False),
    ("dpo_negative_beta", "train_dpo", [*PAIRS, "--beta", "-1"], "--beta -1.0", False),
    ("dpo_ipo_and_smoothing", "train_dpo", [*PAIRS, "--ipo", "--label_smoothing", "0.1"], "--ipo with --label_smoothing",
     False),
    ("rm_margin_logexp", "train_rm", [*PAIRS, "--margin_loss", "--loss", "logexp"], "--margin_loss needs --loss sigmoid",
     False),
    ("rm_bad_head_prefix", "train_rm", [*PAIRS, "--value_head_prefix", "my-head"], "--value_head_prefix 'my-head'", False),
    ("rm_negative_center", "train_rm", [*PAIRS, "--center_rewards_coefficient", "-0.01"],
     "--center_rewards_coefficient -0.01: must be >= 0", False),
    ("kto_micro_batch_1", "train_kto", [*KTO, "--micro_train_batch_size", "1"], "--micro_train_batch_size 1", False),
    ("ppo_ray_no_prompt_data", "train_ppo_ray", [a for a in PPO if a != f"{T}/prompts/train.jsonl" and
                                                 a != "--prompt_data"], "--prompt_data is required", False),
    ("ppo_ray_group_estimator_n1", "train_ppo_ray", [*PPO, "--advantage_estimator", "rloo"],
     "--n_samples_per_prompt 1", False),
    ("ppo_ray_top_p", "train_ppo_ray", [*PPO, "--top_p", "1.5"], "--top_p 1.5", False),
    # negative numbers in any notation reach the check (argparse alone took only -1 and -.5)
    ("sft_lr_negative_exponent", "train_sft", [*SFT, "--learning_rate", "-1e-3"], "--learning_rate -0.001: must be > 0",
     False),
    ("kto_lr_negative_upper_exponent", "train_kto", [*KTO, "--learning_rate", "-1E+2"],
     "--learning_rate -100.0: must be > 0", False),
    ("rm_lr_negative_fraction", "train_rm", [*PAIRS, "--learning_rate", "-.5"], "--learning_rate -0.5: must be > 0",
     False),
    ("sft_l2_negative", "train_sft", [*SFT, "--l2", "-1e-2"], "--l2 -0.01: weight decay must be >= 0", False),
    ("dpo_beta_negative_exponent", "train_dpo", [*PAIRS, "--beta", "-1e-1"], "--beta -0.1: must be > 0", False),
    ("sft_max_steps_0", "train_sft", [*SFT, "--max_steps", "0"], "--max_steps 0: use -1 (run all --max_epochs) or a "
     "positive number", False),
    ("ppo_ray_max_steps_negative", "train_ppo_ray", [*PPO, "--max_steps", "-5"], "--max_steps -5: use -1", False),
    # where things are: model, data and output paths
    ("sft_nonexistent_pretrain", "train_sft", [*SFT, "--pretrain", "@WORK@/no_model"], "directory does not exist", False),
    ("dpo_pretrain_hub_offline", "train_dpo", [*PAIRS, "--pretrain", "meta-llama/Llama-3-8B"], "the hub is offline",
     False),
    ("sft_revision_of_a_directory", "train_sft", [*SFT, "--revision", "v1.0"], "--revision v1.0: --pretrain", False),
    ("dpo_hub_revision_offline", "train_dpo", [*PAIRS, "--pretrain", "meta-llama/Llama-3-8B", "--revision", "v2"],
     "'meta-llama/Llama-3-8B@v2': not a local directory", False),
    ("sft_pretrain_without_tokenizer", "train_sft", [*SFT, "--pretrain", "@BAD@/no_tokenizer"], "no tokenizer", False),
    ("sft_save_path_ftpx", "train_sft", [*SFT, "--save_path", "ftpx://host/out"], "--save_path ftpx://host/out", True),
    ("dpo_save_path_no_bucket", "train_dpo", [*PAIRS, "--save_path", f"{NO_BUCKET}/dpo"], "the bucket 'alignflow-no-such-bucket' does not exist", False),
    ("kto_ckpt_path_no_bucket", "train_kto", [*KTO, "--ckpt_path", f"{NO_BUCKET}/ckpt"],
     "--ckpt_path s3://alignflow-no-such-bucket/ckpt: the bucket", False),
    ("batch_output_path_ftpx", "batch_inference", [*GEN, "--output_path", "ftpx://h/gen"], "--output_path ftpx://",
     False),
    ("ppo_ray_save_path_ftpx", "train_ppo_ray", [*PPO, "--save_path", "ftpx://h/ppo"], "--save_path ftpx://h/ppo", False),
    ("sft_pretrain_is_a_file", "train_sft", [*SFT, "--pretrain", "@BAD@/notes.txt"],
     "notes.txt: is a file; --pretrain takes a model directory (with config.json), a store URI or a hub name", False),
    ("sft_s3_no_credentials", "train_sft", [*SFT, "--save_path", "s3://alignflow-test/no-credentials"],
     "no S3 credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", True),
    # outputs that would replace a file, an input model or the checkpoints (the commit replaces the whole folder)
    ("sft_save_path_is_a_file", "train_sft", [*SFT, "--save_path", "@BAD@/notes.txt"],
     "notes.txt: is a file; pass a directory path", False),
    ("batch_output_path_is_a_file", "batch_inference", [*GEN, "--output_path", "@BAD@/notes.txt"],
     "--output_path @BAD@/notes.txt: is a file; pass a directory path", False),
    ("sft_save_path_empty", "train_sft", [*SFT, "--save_path", ""],
     "--save_path '': empty; pass the folder the output is committed as", False),
    ("sft_save_path_is_the_working_directory", "train_sft", [*SFT, "--save_path", "."],
     "is the working directory or holds it; the commit replaces that whole folder", False),
    ("sft_save_path_is_a_folder_of_the_users", "train_sft", [*SFT, "--save_path", "@BAD@"],
     "--save_path @BAD@: an existing folder that is not a committed output (no MANIFEST.json) holds", False),
    ("rm_ckpt_path_empty", "train_rm", [*PAIRS, "--save_steps", "5", "--ckpt_path", " "],
     "--ckpt_path ' ': empty; pass the folder checkpoints are committed in", False),
    ("sft_save_path_is_pretrain", "train_sft", [*SFT, "--save_path", "@MODEL@"],
     "--save_path @MODEL@: holds --pretrain @MODEL@; the commit replaces the whole --save_path folder", False),
    ("dpo_save_path_is_the_ref_model", "train_dpo", [*PAIRS, "--ref_pretrain", "@OUT@"],
     "--save_path @OUT@: holds --ref_pretrain @OUT@", False),
    ("sft_ckpt_path_deep_inside_save_path", "train_sft", [*SFT, "--save_steps", "5", "--ckpt_path", "@OUT@/a/ckpt"],
     "--ckpt_path @OUT@/a/ckpt lies deeper inside --save_path @OUT@: put it directly inside", False),
    ("rm_ckpt_path_is_save_path", "train_rm", [*PAIRS, "--save_minutes", "10", "--ckpt_path", "@OUT@"],
     "--save_path @OUT@ lies in --ckpt_path @OUT@: a checkpoint folder must not hold the model", False),
    ("kto_save_path_inside_ckpt_path", "train_kto", [*KTO, "--load_checkpoint", "--ckpt_path", "@WORK@"],
     "--save_path @OUT@ lies in --ckpt_path @WORK@: a checkpoint folder must not hold the model", False),
    ("sft_resume_from_a_file", "train_sft", [*SFT, "--load_checkpoint", "--ckpt_path", "@BAD@/notes.txt"],
     "--ckpt_path @BAD@/notes.txt: is a file", False),
    ("dpo_resume_from_a_model_folder", "train_dpo", [*PAIRS, "--load_checkpoint", "--ckpt_path", "@BAD@/no_tokenizer"],
     "--ckpt_path @BAD@/no_tokenizer: is not a checkpoint folder", False),
    ("sft_missing_dataset", "train_sft", [*SFT, "--dataset", "@WORK@/nope.jsonl"], "nope.jsonl does not exist", False),
    ("sft_missing_eval_dataset", "train_sft", [*SFT, "--eval_dataset", "@WORK@/nope.jsonl"], "--eval_dataset", False),
    ("ppo_ray_missing_prompt_file", "train_ppo_ray", [*PPO, "--prompt_data", "@WORK@/nope.jsonl"],
     "check the --prompt_data path", False),
    ("sft_dataset_no_bucket", "train_sft", [*SFT, "--dataset", f"{NO_BUCKET}/data/train.jsonl"],
     "--dataset s3://alignflow-no-such-bucket/data/train.jsonl: the bucket", False),
    ("sft_dataset_hub_offline", "train_sft", [*SFT, "--dataset", "someone/some-data"], "the hub is offline", False),
    # what is in the data files
    ("sft_non_utf8", "train_sft", [*SFT, "--dataset", "@BAD@/latin1.jsonl"], "latin1.jsonl:3", True),
    ("sft_malformed_json", "train_sft", [*SFT, "--dataset", "@BAD@/malformed.jsonl"], "malformed.jsonl:2", False),
    ("sft_empty_dataset", "train_sft", [*SFT, "--dataset", "@BAD@/empty.jsonl"], "has 0 rows", False),
    ("sft_wrong_input_key", "train_sft", [*SFT, "--input_key", "prompt"], "missing key 'prompt' (--input_key)", False),
    ("sft_no_output_key", "train_sft", [a for a in SFT if a not in ("--output_key", "output")], "--output_key", False),
    ("sft_multiturn_string", "train_sft", [*SFT, "--multiturn", "--apply_chat_template"],
     "row 0: --input_key 'input' is a string", False),
    ("rm_int_chosen", "train_rm", [*PAIRS, "--dataset", "@BAD@/int_chosen.jsonl"], "row 1: --chosen_key 'chosen'", False),
    ("rm_wrong_rejected_key", "train_rm", [*PAIRS, "--rejected_key", "worse"], "missing key 'worse'", False),
    ("kto_bad_label", "train_kto", [*KTO, "--label_key", "output"], "--label_key 'output'", False),
    ("ppo_ray_wrong_input_key", "train_ppo_ray", [*PPO, "--input_key", "question"], "missing key 'question'", False),
    # a reward_func file, called once before any group is placed (alignment/cli/preflight.py)
    ("ppo_ray_reward_signature", "train_ppo_ray", [*PPO, "--remote_rm_url", "@BAD@/reward_signature.py"],
     "reward_func(queries) cannot be called as reward_func(queries, prompts, labels)", False),
    ("ppo_ray_reward_wrong_length", "train_ppo_ray", [*PPO, "--remote_rm_url", "@BAD@/reward_length.py"],
     "reward_length.py ['rewards']: expected 2 rewards, got 1", False),
    ("ppo_reward_raises", "train_ppo", [*PPO, "--remote_rm_url", "@BAD@/reward_raises.py"],
     "reward_func raised ValueError: no label", False),
    ("batch_null_prompt", "batch_inference", [*GEN, "--dataset", "@BAD@/null_prompt.jsonl"],
     "null_prompt.jsonl row 1: --input_key 'input' is null; expected a string", False),
    # distillation, LoRA merging, the optimizer
    ("kd_no_teacher", "train_kd", SFT, "--teacher_model is required", False),
    ("kd_coef_above_1", "train_kd", [*SFT, "--teacher_model", "@MODEL@", "--kd_coef", "1.5"],
     "--kd_coef 1.5: must be in [0, 1]", False),
    ("kd_teacher_other_vocabulary", "train_kd", [*SFT, "--teacher_model", "@BAD@/other_vocab"],
     "--teacher_model @BAD@/other_vocab: a vocabulary of 300 tokens, --pretrain @MODEL@ has 271", False),
    ("opd_top_p_with_sampled_tokens", "train_opd", ["--pretrain", "@MODEL@", "--teacher_model", "@MODEL@", "--dataset",
                                                    f"{T}/prompts/train.jsonl", "--top_p", "0.9"],
     "--top_p 0.9 with --opd_topk 0: the sampled-token estimator needs samples from the student's whole", False),
    ("opd_sft_flag", "train_opd", ["--pretrain", "@MODEL@", "--teacher_model", "@MODEL@", "--dataset",
                                   f"{T}/prompts/train.jsonl", "--output_key", "output"],
     "--output_key, --multiturn and --pretrain_mode are SFT flags", False),
    ("lora_combiner_not_an_adapter", "lora_combiner", ["--model_path", "@MODEL@", "--lora_path", "@MODEL@",
                                                       "--output_path", "@WORK@/merged"],
     "--lora_path @MODEL@: no adapter_config.json there", False),
    ("prm_no_placeholder_token", "train_prm", PRM, "--placeholder_token is required", False),
    ("prm_placeholder_not_one_token", "train_prm", [*PRM, "--placeholder_token", "ки", "--reward_tokens", "+", "-"],
     "--placeholder_token 'ки' is 4 tokens for this tokenizer", False),
    ("sft_unknown_optim", "train_sft", [*SFT, "--optim", "sgd"], "--optim: invalid choice: 'sgd'", False),
    ("sft_muon_lr_without_muon", "train_sft", [*SFT, "--muon_lr", "0.02"],
     "--muon_lr 0.02 sets the Muon half of --optim muon", False),
    # issue 62, item 7: what reached a traceback, a misleading line or a run that trained on nothing
    ("sft_chat_template_syntax_error", "train_sft",
     [*SFT, "--apply_chat_template", "--tokenizer_chat_template", "{% for m in messages %}\n{{ m.content }\n{% endfor %}"],
     "--tokenizer_chat_template: the chat template does not parse: line 2: unexpected '}' in `{{ m.content }`", True),
    ("dpo_model_folder_broken_chat_template", "train_dpo", [*PAIRS, "--pretrain", "@BAD@/broken_template",
                                                            "--apply_chat_template"],
     "@BAD@/broken_template/chat_template.jinja: the chat template does not parse: line 2", False),
    ("sft_save_path_read_only", "train_sft", [*SFT, "--save_path", "@RO@/sft"],
     "--save_path @RO@/sft: cannot create files in @RO@", False),
    ("rm_ckpt_path_read_only", "train_rm", [*PAIRS, "--save_steps", "5", "--ckpt_path", "@RO@/ckpt"],
     "--ckpt_path @RO@/ckpt: cannot create files in @RO@", False),
    ("batch_output_path_read_only", "batch_inference", [*GEN, "--output_path", "@RO@/gen"],
     "--output_path @RO@/gen: cannot create files in @RO@", False),
    ("sft_all_responses_empty", "train_sft", [*SFT, "--dataset", "@BAD@/empty_responses.jsonl"],
     "empty_responses.jsonl: in all 3 rows --output_key 'output' is empty: nothing to learn but the end token", False),
    ("sft_multiturn_all_assistant_turns_empty", "train_sft",
     [*SFT, "--dataset", "@BAD@/empty_turns.jsonl", "--input_key", "messages", "--multiturn", "--apply_chat_template"],
     "in all 2 rows every assistant turn in --input_key 'messages' is empty", False),
    ("sft_pretrain_without_weights", "train_sft", [*SFT, "--pretrain", "@BAD@/no_weights"],
     "--pretrain @BAD@/no_weights: no weights in that directory (none of model.safetensors, "
     "model.safetensors.index.json, pytorch_model.bin", False),
    ("sft_pretrain_missing_shard", "train_sft", [*SFT, "--pretrain", "@BAD@/missing_shard"],
     "--pretrain @BAD@/missing_shard: model.safetensors.index.json names 2 weight files but "
     "model-00002-of-00002.safetensors is missing", False),
    ("sft_pretrain_empty_folder", "train_sft", [*SFT, "--pretrain", "@BAD@/empty_model"],
     "--pretrain @BAD@/empty_model: no config.json in that directory", False),
    ("kd_teacher_missing", "train_kd", [*SFT, "--teacher_model", "@WORK@/no_teacher"],
     "--teacher_model @WORK@/no_teacher: directory does not exist", False),
    ("sft_save_path_inside_pretrain", "train_sft", [*SFT, "--save_path", "@MODEL@/sft"],
     "--save_path @MODEL@/sft: inside --pretrain @MODEL@; a run must not write into a model it reads", False),
    ("sft_ckpt_path_is_pretrain", "train_sft", [*SFT, "--save_steps", "5", "--ckpt_path", "@MODEL@"],
     "--ckpt_path @MODEL@: inside --pretrain @MODEL@", False),
    ("dpo_ckpt_path_inside_pretrain", "train_dpo", [*PAIRS, "--save_minutes", "10", "--ckpt_path", "@MODEL@/ckpt"],
     "--ckpt_path @MODEL@/ckpt: inside --pretrain @MODEL@", False),
    ("sft_learning_rate_inf", "train_sft", [*SFT, "--learning_rate", "inf"],
     "--learning_rate inf: expected a finite number", False),
    ("sft_dataset_probs_inf", "train_sft", [*SFT, "--dataset_probs", "inf"],
     "--dataset_probs inf: inf is not a finite number", False),
    ("sft_dataset_probs_nan", "train_sft", [*SFT, "--dataset", f"{T}/sft/train.jsonl,{T}/sft/test.jsonl",
                                            "--dataset_probs", "0.5,nan"],
     "--dataset_probs 0.5,nan: nan is not a finite number", False),
    ("ppo_ray_reward_weights_nan", "train_ppo_ray", [*PPO, "--reward_pretrain", "@MODEL@,@MODEL@", "--reward_weights",
                                                     "1,nan"],
     "--reward_weights '1,nan': every weight must be a finite number", False),
    ("sft_input_template_two_slots", "train_sft", [*SFT, "--input_template", "{} and {}"],
     "--input_template '{} and {}': str.format fails with one prompt (IndexError", False),
    ("sft_lora_alpha_0", "train_sft", [*SFT, "--lora_rank", "8", "--lora_alpha", "0"],
     "--lora_alpha 0: must be > 0 with --lora_rank 8", False),
    # already one line, kept so they stay so: what users really type
    ("sft_json_array_row", "train_sft", [*SFT, "--dataset", "@BAD@/array_row.jsonl"],
     "array_row.jsonl:2: expected a JSON object per line, got list", False),
    ("sft_config_malformed_yaml", "train_sft", [*SFT, "--config", "@BAD@/malformed.yaml"],
     "malformed.yaml: not valid YAML", False),
    ("sft_config_yaml_list", "train_sft", [*SFT, "--config", "@BAD@/list.yaml"],
     "list.yaml: expected a mapping of flag: value", False),
    ("sft_dataset_folder_without_data", "train_sft", [*SFT, "--dataset", "@BAD@/no_data"],
     "has no 'train' split: expected train.jsonl", False),
    ("sft_max_epochs_0", "train_sft", [*SFT, "--max_epochs", "0"], "--max_epochs 0: must be > 0", False),
    ("sft_max_samples_negative", "train_sft", [*SFT, "--max_samples", "-5"], "--max_samples -5: must be > 0", False),
    ("ppo_ray_n_samples_per_prompt_0", "train_ppo_ray", [*PPO, "--n_samples_per_prompt", "0"],
     "--n_samples_per_prompt 0: must be >= 1", False),
    ("ppo_ray_temperature_negative", "train_ppo_ray", [*PPO, "--temperature", "-1"], "--temperature -1.0: must be > 0",
     False),
    ("ppo_ray_micro_rollout_batch_0", "train_ppo_ray", [*PPO, "--micro_rollout_batch_size", "0"],
     "--micro_rollout_batch_size must be > 0", False),
    # images (docs/vision.md): before any model loads, named with the file and row
    ("sft_images_text_only_model", "train_sft", [*VSFT, "--pretrain", "@MODEL@"],
     "is a text-only model (its config has no vision_config)", False),
    ("sft_image_missing", "train_sft", [*VSFT, "--dataset", "@BAD@/vision/missing.jsonl"],
     "@BAD@/vision/missing.jsonl row 1: image", False),
    ("sft_image_unreadable", "train_sft", [*VSFT, "--dataset", "@BAD@/vision/unreadable.jsonl"],
     "is not a readable image", False),
    ("sft_too_many_images", "train_sft", [*VSFT, "--dataset", "@BAD@/vision/two_images.jsonl"],
     "row 0: 2 images, more than --max_images_per_prompt 1", False),
    ("sft_image_without_placeholder", "train_sft", [*VSFT, "--dataset", "@BAD@/vision/no_tag.jsonl"],
     "row 0: 1 images but 0 image placeholders", False),
    ("sft_images_packing", "train_sft", [*VSFT, "--packing_samples"],
     "--packing_samples with images", False),
    ("sft_processor_of_another_model", "train_sft", [*VSFT, "--pretrain", "@BAD@/vision/other_processor"],
     "the processor belongs to another model", False),
    ("prm_images", "train_prm", [*PRM, "--max_images_per_prompt", "1"],
     "the process reward model reads text only", False),
    ("ppo_ray_images_critic", "train_ppo_ray", [*VPPO, "--remote_rm_url", f"{T}/reward_func.py",
                                                 "--advantage_estimator", "gae"],
     "a critic is not built for vision-language models", False),
    ("ppo_ray_images_reward_model", "train_ppo_ray", [*VPPO, "--reward_pretrain", "@MODEL@"],
     "a reward model reads the text alone", False),
    ("eval_images_pairs", "evaluate", [*EVAL, "--max_images_per_prompt", "1", "--eval_task", "pairs"],
     "images are built for --eval_task generate", False),
]
# fmt: on
# Environments of their own (None: the variable removed), for real subprocesses only: the driver's store
# clients keep the credentials they were made with. No key anywhere, and no instance-metadata lookup.
CASE_ENV = {
    "sft_s3_no_credentials": {
        "AWS_ACCESS_KEY_ID": None,
        "AWS_SECRET_ACCESS_KEY": None,
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
}


def _drive(spec: str) -> None:
    """In a fresh interpreter: run each case's CLI entry in-process and write {name: [code, stderr, s]}."""
    import importlib
    import logging
    import os
    import traceback

    import ray
    from transformers import PreTrainedModel

    from alignment.cli.common import run_main

    def forbidden(what):
        def hit(*a, **k):
            print(f"FORBIDDEN: {what} before the error", file=sys.stderr)
            raise RuntimeError(what)

        return hit

    PreTrainedModel.from_pretrained = classmethod(forbidden("a model loaded"))  # every Auto* load ends here
    ray.init = forbidden("Ray started")
    job = json.loads(Path(spec).read_text())
    results = {}
    for name, module, argv in job["cases"]:
        main = importlib.import_module(f"alignment.cli.{module}").main
        saved_env, saved_err, buf = dict(os.environ), sys.stderr, io.StringIO()
        sys.stderr = buf
        for h in logging.root.handlers[:]:  # run_main's basicConfig then logs into this case's buffer
            logging.root.removeHandler(h)
        start, code = time.monotonic(), 0
        try:
            run_main(main, argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:  # what `python -m` would print
            traceback.print_exc()
            code = 1
        finally:
            sys.stderr = saved_err
            os.environ.clear()
            os.environ.update(saved_env)
        results[name] = [code, buf.getvalue(), time.monotonic() - start]
    Path(job["out"]).write_text(json.dumps(results))


def _tree_hash(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def world(tiny_base, module_tmp, moto_endpoint):
    """Bad files, a committed model at --save_path, and the env every run gets (S3 pointed at moto)."""
    from alignment import storage

    work = module_tmp
    bad = work / "bad"
    bad.mkdir()
    write_bad_files(bad, tiny_base)
    vlm = write_vision_files(bad / "vision", work / "vlm")
    out = work / "committed"
    shutil.copytree(tiny_base, out)
    storage.commit_dir(out, out, metadata={"stage": "test_bad_input"})
    env = python_env(
        AWS_ENDPOINT_URL_S3=moto_endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY=PLANTED_SECRET,
        AWS_DEFAULT_REGION="us-east-1",
        OMP_NUM_THREADS="1",
    )
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "RAY_ADDRESS"):
        env.pop(var, None)
    subst = {"@MODEL@": str(tiny_base), "@OUT@": str(out), "@BAD@": str(bad), "@WORK@": str(work), "@VLM@": str(vlm)}
    with read_only_dir(work / "read_only") as ro_why_not:  # @RO@: an empty read-only mount (tests/mounts.py)
        subst["@RO@"] = str(work / "read_only")
        yield work, out, env, lambda argv: [_subst(a, subst) for a in argv], ro_why_not


def _needs_read_only(argv: list[str]) -> bool:
    return any("@RO@" in a for a in argv)


def _subst(arg: str, subst: dict[str, str]) -> str:
    for key, value in subst.items():
        arg = arg.replace(key, value)
    return arg


@pytest.fixture(scope="module")
def results(world):
    """{case name: (exit status, stderr, seconds)} for every case; the committed model hashed around them."""
    work, out, env, fill, ro_why_not = world
    runnable = [c for c in CASES if ro_why_not is None or not _needs_read_only(c[2])]
    before = _tree_hash(out)
    cwd = work / "cwd"  # the CLIs' relative defaults (./ckpt) land here: nothing may appear
    cwd.mkdir()
    res = {}
    for name, module, argv, _, real in runnable:
        if real:
            start = time.monotonic()
            case_env = {**env, **CASE_ENV.get(name, {})}
            proc = subprocess.run(
                [sys.executable, "-m", f"alignment.cli.{module}", *fill(argv)],
                cwd=cwd,
                env={k: v for k, v in case_env.items() if v is not None},
                capture_output=True,
                text=True,
                timeout=300,
            )
            res[name] = (proc.returncode, proc.stderr, time.monotonic() - start)
    spec = work / "driver.json"
    spec.write_text(
        json.dumps(
            {
                "out": str(work / "driver_out.json"),
                "cases": [(n, m, fill(a)) for n, m, a, _, real in runnable if not real],
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-c", f"from tests.test_bad_input import _drive; _drive({str(spec)!r})"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res.update({k: tuple(v) for k, v in json.loads((work / "driver_out.json").read_text()).items()})
    print("\n".join(f"{n}: {res[n][2]:.1f}s  {res[n][1].strip()}" for n, *_ in runnable))
    assert _tree_hash(out) == before, "a bad-input run changed the committed model at --save_path"
    assert not any(cwd.iterdir()), sorted(cwd.iterdir())
    return res


def test_corpus_is_big_enough():
    assert len(CASES) >= 120 and len({c[0] for c in CASES}) == len(CASES)
    assert all(c[4] for c in CASES if c[0] in CASE_ENV) and set(CASE_ENV) <= {c[0] for c in CASES}
    assert sum(c[4] for c in CASES) >= 6  # the usage-block cases and two deeper ones run as real processes


@pytest.mark.parametrize("name, module, argv, needle, real", CASES, ids=[c[0] for c in CASES])
def test_one_clear_line(results, world, name, module, argv, needle, real):
    if world[4] is not None and _needs_read_only(argv):
        pytest.skip(f"no read-only folder can be made here ({world[4]}): root writes through chmod 0555")
    code, stderr, _ = results[name]
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert code == 2, stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    assert world[3]([needle])[0] in lines[0], lines[0]
    assert "Traceback" not in stderr and "usage:" not in stderr and "FORBIDDEN" not in stderr
    assert "Loading weights" not in stderr and PLANTED_SECRET not in stderr


def test_reliability_doc_lists_every_case():
    """docs/reliability.md's corpus table names every case (regenerate it when a case is added)."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "reliability.md").read_text()
    assert f"holds {len(CASES)} bad inputs" in doc
    assert [n for n, *_ in CASES if f"| `{n}` |" not in doc] == []
