"""The bad-input corpus, the cases of the reward-model, preference and distillation trainers (train_rm, train_prm,
train_dpo, train_kto, train_kd): each case's name, the CLI, its argv (@MODEL@, @OUT@, @WORK@ and the bad files' names
filled in by tests/test_bad_input.py, which joins the stage families' tables), the text its one error line must hold,
and whether it runs as a real subprocess."""

from __future__ import annotations

from tests.bad_input_commands import KTO, NO_BUCKET, PAIRS, PRM, SFT

# (name, CLI, argv, what the one line must contain, run as a real subprocess): one case a line reads as a table
# fmt: off
PREFERENCE_CASES = [
    # argparse: an unknown flag, a value of the wrong type, a choice that does not exist
    ("rm_lr_string", "train_rm", [*PAIRS, "--learning_rate", "fast"], "--learning_rate: invalid float value", True),
    ("dpo_bool_string", "train_dpo", [*PAIRS, "--ipo", "maybe"], "--ipo: expected true/false, got 'maybe'", True),
    ("kto_unknown_scheduler", "train_kto", [*KTO, "--lr_scheduler", "exp"], "--lr_scheduler: invalid choice", False),
    ("rm_unknown_loss", "train_rm", [*PAIRS, "--loss", "hinge"], "--loss: invalid choice: 'hinge'", False),
    # values that parse but make no sense
    ("dpo_negative_beta", "train_dpo", [*PAIRS, "--beta", "-1"], "--beta -1.0", False),
    ("dpo_ipo_and_smoothing", "train_dpo", [*PAIRS, "--ipo", "--label_smoothing", "0.1"], "--ipo with --label_smoothing",
     False),
    ("rm_margin_logexp", "train_rm", [*PAIRS, "--margin_loss", "--loss", "logexp"], "--margin_loss needs --loss sigmoid",
     False),
    ("rm_bad_head_prefix", "train_rm", [*PAIRS, "--value_head_prefix", "my-head"], "--value_head_prefix 'my-head'", False),
    ("rm_negative_center", "train_rm", [*PAIRS, "--center_rewards_coefficient", "-0.01"],
     "--center_rewards_coefficient -0.01: must be >= 0", False),
    ("kto_micro_batch_1", "train_kto", [*KTO, "--micro_train_batch_size", "1"], "--micro_train_batch_size 1", False),
    # what this machine cannot run: said before any model loads
    ("dpo_ring_attn_without_cuda", "train_dpo", [*PAIRS, "--ring_attn_size", "4"],
     "--ring_attn_size 4: ring attention needs CUDA", False),
    ("rm_4bit_without_cuda", "train_rm", [*PAIRS, "--load_in_4bit", "--lora_rank", "8"],
     "--load_in_4bit needs a CUDA GPU", False),
    # negative numbers in any notation reach the check (argparse alone took only -1 and -.5)
    ("kto_lr_negative_upper_exponent", "train_kto", [*KTO, "--learning_rate", "-1E+2"],
     "--learning_rate -100.0: must be > 0", False),
    ("rm_lr_negative_fraction", "train_rm", [*PAIRS, "--learning_rate", "-.5"], "--learning_rate -0.5: must be > 0",
     False),
    ("dpo_beta_negative_exponent", "train_dpo", [*PAIRS, "--beta", "-1e-1"], "--beta -0.1: must be > 0", False),
    # where things are: model, data and output paths
    ("dpo_pretrain_hub_offline", "train_dpo", [*PAIRS, "--pretrain", "meta-llama/Llama-3-8B"], "the hub is offline",
     False),
    ("dpo_hub_revision_offline", "train_dpo", [*PAIRS, "--pretrain", "meta-llama/Llama-3-8B", "--revision", "v2"],
     "'meta-llama/Llama-3-8B@v2': not a local directory", False),
    ("dpo_save_path_no_bucket", "train_dpo", [*PAIRS, "--save_path", f"{NO_BUCKET}/dpo"], "the bucket 'alignflow-no-such-bucket' does not exist", False),
    ("kto_ckpt_path_no_bucket", "train_kto", [*KTO, "--ckpt_path", f"{NO_BUCKET}/ckpt"],
     "--ckpt_path s3://alignflow-no-such-bucket/ckpt: the bucket", False),
    # outputs that would replace a file, an input model or the checkpoints (the commit replaces the whole folder)
    ("rm_ckpt_path_empty", "train_rm", [*PAIRS, "--save_steps", "5", "--ckpt_path", " "],
     "--ckpt_path ' ': empty; pass the folder checkpoints are committed in", False),
    ("dpo_save_path_is_the_ref_model", "train_dpo", [*PAIRS, "--ref_pretrain", "@OUT@"],
     "--save_path @OUT@: holds --ref_pretrain @OUT@", False),
    ("rm_ckpt_path_is_save_path", "train_rm", [*PAIRS, "--save_minutes", "10", "--ckpt_path", "@OUT@"],
     "--save_path @OUT@ lies in --ckpt_path @OUT@: a checkpoint folder must not hold the model", False),
    ("kto_save_path_inside_ckpt_path", "train_kto", [*KTO, "--load_checkpoint", "--ckpt_path", "@WORK@"],
     "--save_path @OUT@ lies in --ckpt_path @WORK@: a checkpoint folder must not hold the model", False),
    ("dpo_resume_from_a_model_folder", "train_dpo", [*PAIRS, "--load_checkpoint", "--ckpt_path", "@BAD@/no_tokenizer"],
     "--ckpt_path @BAD@/no_tokenizer: is not a checkpoint folder", False),
    # what is in the data files
    ("rm_int_chosen", "train_rm", [*PAIRS, "--dataset", "@BAD@/int_chosen.jsonl"], "row 1: --chosen_key 'chosen'", False),
    ("rm_wrong_rejected_key", "train_rm", [*PAIRS, "--rejected_key", "worse"], "missing key 'worse'", False),
    ("kto_bad_label", "train_kto", [*KTO, "--label_key", "output"], "--label_key 'output'", False),
    # distillation, LoRA merging, the optimizer
    ("kd_no_teacher", "train_kd", SFT, "--teacher_model is required", False),
    ("kd_coef_above_1", "train_kd", [*SFT, "--teacher_model", "@MODEL@", "--kd_coef", "1.5"],
     "--kd_coef 1.5: must be in [0, 1]", False),
    ("kd_teacher_other_vocabulary", "train_kd", [*SFT, "--teacher_model", "@BAD@/other_vocab"],
     "--teacher_model @BAD@/other_vocab: a vocabulary of 300 tokens, --pretrain @MODEL@ has 271", False),
    ("prm_no_placeholder_token", "train_prm", PRM, "--placeholder_token is required", False),
    ("prm_placeholder_not_one_token", "train_prm", [*PRM, "--placeholder_token", "ки", "--reward_tokens", "+", "-"],
     "--placeholder_token 'ки' is 4 tokens for this tokenizer", False),
    # issue 62, item 7: what reached a traceback, a misleading line or a run that trained on nothing
    ("dpo_model_folder_broken_chat_template", "train_dpo", [*PAIRS, "--pretrain", "@BAD@/broken_template",
                                                            "--apply_chat_template"],
     "@BAD@/broken_template/chat_template.jinja: the chat template does not parse: line 2", False),
    ("rm_ckpt_path_read_only", "train_rm", [*PAIRS, "--save_steps", "5", "--ckpt_path", "@RO@/ckpt"],
     "--ckpt_path @RO@/ckpt: cannot create files in @RO@", False),
    ("kd_teacher_missing", "train_kd", [*SFT, "--teacher_model", "@WORK@/no_teacher"],
     "--teacher_model @WORK@/no_teacher: directory does not exist", False),
    ("dpo_ckpt_path_inside_pretrain", "train_dpo", [*PAIRS, "--save_minutes", "10", "--ckpt_path", "@MODEL@/ckpt"],
     "--ckpt_path @MODEL@/ckpt: inside --pretrain @MODEL@", False),
    # images (docs/vision.md): before any model loads, named with the file and row
    ("prm_images", "train_prm", [*PRM, "--max_images_per_prompt", "1"],
     "the process reward model reads text only", False),
]
# fmt: on
