"""The bad-input corpus, SFT's cases (train_sft): each case's name, the CLI, its argv (@MODEL@, @OUT@, @WORK@, @VLM@
and the bad files' names filled in by tests/test_bad_input.py, which joins the stage families' tables), the text its
one error line must hold, and whether it runs as a real subprocess; and the cases that run in an environment of their
own."""

from __future__ import annotations

from tests.bad_input_commands import NO_BUCKET, SFT, VSFT, T

# (name, CLI, argv, what the one line must contain, run as a real subprocess): one case a line reads as a table
# fmt: off
SFT_CASES = [
    # argparse: an unknown flag, a value of the wrong type, a choice that does not exist
    ("sft_unknown_flag", "train_sft", [*SFT, "--foo"], "unrecognized argument --foo", True),
    ("sft_flag_typo", "train_sft", [*SFT, "--leraning_rate", "1e-5"], "did you mean --learning_rate", True),
    ("sft_zero_stage_5", "train_sft", [*SFT, "--zero_stage", "5"], "--zero_stage: invalid choice: 5", True),
    ("sft_zero_stage_word", "train_sft", [*SFT, "--zero_stage", "two"], "--zero_stage: invalid int value", False),
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
    # what this machine cannot run: said before any model loads
    ("sft_4bit_without_cuda", "train_sft", [*SFT, "--load_in_4bit", "--lora_rank", "8"],
     "--load_in_4bit needs a CUDA GPU and the bitsandbytes package", False),
    ("sft_4bit_without_lora", "train_sft", [*SFT, "--load_in_4bit"], "also pass --lora_rank", False),
    ("sft_ring_attn_without_cuda", "train_sft", [*SFT, "--ring_attn_size", "2"],
     "--ring_attn_size 2: ring attention needs CUDA GPUs with flash-attn and ring-flash-attn", False),
    ("sft_ring_attn_0", "train_sft", [*SFT, "--ring_attn_size", "0"], "--ring_attn_size 0: must be >= 1", False),
    # later OpenRLHF flags where they do not apply, or not built: one line saying what to use instead, never
    # accepted and ignored
    ("sft_vllm_enable_sleep", "train_sft", [*SFT, "--vllm_enable_sleep"],
     "--vllm_enable_sleep: vLLM sleep mode applies to the rollout engines of train_ppo_ray only", False),
    ("sft_use_dynamic_batch", "train_sft", [*SFT, "--use_dynamic_batch"],
     "--use_dynamic_batch: token-budget micro-batches are built for the PPO family", False),
    # importing a model: a folder that holds none
    ("sft_aux_loss_on_a_dense_model", "train_sft", [*SFT, "--aux_loss_coef", "0.01"],
     "dense llama model with no MoE router", False),
    # negative numbers in any notation reach the check (argparse alone took only -1 and -.5)
    ("sft_lr_negative_exponent", "train_sft", [*SFT, "--learning_rate", "-1e-3"], "--learning_rate -0.001: must be > 0",
     False),
    ("sft_l2_negative", "train_sft", [*SFT, "--l2", "-1e-2"], "--l2 -0.01: weight decay must be >= 0", False),
    ("sft_max_steps_0", "train_sft", [*SFT, "--max_steps", "0"], "--max_steps 0: use -1 (run all --max_epochs) or a "
     "positive number", False),
    # where things are: model, data and output paths
    ("sft_nonexistent_pretrain", "train_sft", [*SFT, "--pretrain", "@WORK@/no_model"], "directory does not exist", False),
    ("sft_revision_of_a_directory", "train_sft", [*SFT, "--revision", "v1.0"], "--revision v1.0: --pretrain", False),
    ("sft_pretrain_without_tokenizer", "train_sft", [*SFT, "--pretrain", "@BAD@/no_tokenizer"], "no tokenizer", False),
    ("sft_save_path_ftpx", "train_sft", [*SFT, "--save_path", "ftpx://host/out"], "--save_path ftpx://host/out", True),
    ("sft_pretrain_is_a_file", "train_sft", [*SFT, "--pretrain", "@BAD@/notes.txt"],
     "notes.txt: is a file; --pretrain takes a model directory (with config.json), a store URI or a hub name", False),
    ("sft_s3_no_credentials", "train_sft", [*SFT, "--save_path", "s3://alignflow-test/no-credentials"],
     "no S3 credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", True),
    # outputs that would replace a file, an input model or the checkpoints (the commit replaces the whole folder)
    ("sft_save_path_is_a_file", "train_sft", [*SFT, "--save_path", "@BAD@/notes.txt"],
     "notes.txt: is a file; pass a directory path", False),
    ("sft_save_path_empty", "train_sft", [*SFT, "--save_path", ""],
     "--save_path '': empty; pass the folder the output is committed as", False),
    ("sft_save_path_is_the_working_directory", "train_sft", [*SFT, "--save_path", "."],
     "is the working directory or holds it; the commit replaces that whole folder", False),
    ("sft_save_path_is_a_folder_of_the_users", "train_sft", [*SFT, "--save_path", "@BAD@"],
     "--save_path @BAD@: an existing folder that is not a committed output (no MANIFEST.json) holds", False),
    ("sft_save_path_is_pretrain", "train_sft", [*SFT, "--save_path", "@MODEL@"],
     "--save_path @MODEL@: holds --pretrain @MODEL@; the commit replaces the whole --save_path folder", False),
    ("sft_ckpt_path_deep_inside_save_path", "train_sft", [*SFT, "--save_steps", "5", "--ckpt_path", "@OUT@/a/ckpt"],
     "--ckpt_path @OUT@/a/ckpt lies deeper inside --save_path @OUT@: put it directly inside", False),
    ("sft_resume_from_a_file", "train_sft", [*SFT, "--load_checkpoint", "--ckpt_path", "@BAD@/notes.txt"],
     "--ckpt_path @BAD@/notes.txt: is a file", False),
    ("sft_missing_dataset", "train_sft", [*SFT, "--dataset", "@WORK@/nope.jsonl"], "nope.jsonl does not exist", False),
    ("sft_missing_eval_dataset", "train_sft", [*SFT, "--eval_dataset", "@WORK@/nope.jsonl"], "--eval_dataset", False),
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
    # distillation, LoRA merging, the optimizer
    ("sft_unknown_optim", "train_sft", [*SFT, "--optim", "sgd"], "--optim: invalid choice: 'sgd'", False),
    ("sft_muon_lr_without_muon", "train_sft", [*SFT, "--muon_lr", "0.02"],
     "--muon_lr 0.02 sets the Muon half of --optim muon", False),
    # issue 62, item 7: what reached a traceback, a misleading line or a run that trained on nothing
    ("sft_chat_template_syntax_error", "train_sft",
     [*SFT, "--apply_chat_template", "--tokenizer_chat_template", "{% for m in messages %}\n{{ m.content }\n{% endfor %}"],
     "--tokenizer_chat_template: the chat template does not parse: line 2: unexpected '}' in `{{ m.content }`", True),
    ("sft_save_path_read_only", "train_sft", [*SFT, "--save_path", "@RO@/sft"],
     "--save_path @RO@/sft: cannot create files in @RO@", False),
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
    ("sft_save_path_inside_pretrain", "train_sft", [*SFT, "--save_path", "@MODEL@/sft"],
     "--save_path @MODEL@/sft: inside --pretrain @MODEL@; a run must not write into a model it reads", False),
    ("sft_ckpt_path_is_pretrain", "train_sft", [*SFT, "--save_steps", "5", "--ckpt_path", "@MODEL@"],
     "--ckpt_path @MODEL@: inside --pretrain @MODEL@", False),
    ("sft_learning_rate_inf", "train_sft", [*SFT, "--learning_rate", "inf"],
     "--learning_rate inf: expected a finite number", False),
    ("sft_dataset_probs_inf", "train_sft", [*SFT, "--dataset_probs", "inf"],
     "--dataset_probs inf: inf is not a finite number", False),
    ("sft_dataset_probs_nan", "train_sft", [*SFT, "--dataset", f"{T}/sft/train.jsonl,{T}/sft/test.jsonl",
                                            "--dataset_probs", "0.5,nan"],
     "--dataset_probs 0.5,nan: nan is not a finite number", False),
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
