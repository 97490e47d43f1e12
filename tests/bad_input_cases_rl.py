"""The bad-input corpus, the RL trainers' cases (train_ppo, train_ppo_ray, train_opd): each case's name, the CLI, its
argv (@MODEL@, @OUT@, @WORK@, @VLM@ and the bad files' names filled in by tests/test_bad_input.py, which joins the
stage families' tables), the text its one error line must hold, and whether it runs as a real subprocess."""

from __future__ import annotations

from tests.bad_input_commands import PPO, VPPO, T

# (name, CLI, argv, what the one line must contain, run as a real subprocess): one case a line reads as a table
# fmt: off
RL_CASES = [
    # argparse: an unknown flag, a value of the wrong type, a choice that does not exist
    ("ppo_ray_unknown_estimator", "train_ppo_ray", [*PPO, "--advantage_estimator", "ppo2"],
     "--advantage_estimator: invalid choice: 'ppo2'", True),
    # values that parse but make no sense
    ("ppo_ray_no_prompt_data", "train_ppo_ray", [a for a in PPO if a != f"{T}/prompts/train.jsonl" and
                                                 a != "--prompt_data"], "--prompt_data is required", False),
    ("ppo_ray_group_estimator_n1", "train_ppo_ray", [*PPO, "--advantage_estimator", "rloo"],
     "--n_samples_per_prompt 1", False),
    ("ppo_ray_top_p", "train_ppo_ray", [*PPO, "--top_p", "1.5"], "--top_p 1.5", False),
    ("ppo_prompt_max_len_3", "train_ppo", [*PPO, "--prompt_max_len", "3"],
     "prompts are longer than --prompt_max_len 3; raise --prompt_max_len", False),
    ("ppo_rollout_not_a_multiple", "train_ppo", [*PPO, "--rollout_batch_size", "12", "--micro_rollout_batch_size", "4"],
     "is not a multiple of --train_batch_size 8", False),
    # what this machine cannot run: said before any model loads
    ("ppo_ring_attn_without_cuda", "train_ppo", [*PPO, "--ring_attn_size", "2"],
     "--ring_attn_size 2: ring attention needs CUDA GPUs with flash-attn and ring-flash-attn (no CUDA device here)",
     False),
    ("ppo_4bit_without_cuda", "train_ppo", [*PPO, "--load_in_4bit", "--lora_rank", "8"],
     "--load_in_4bit needs a CUDA GPU and the bitsandbytes package", False),
    # later OpenRLHF flags where they do not apply, or not built: one line saying what to use instead, never
    # accepted and ignored
    ("ppo_vllm_engines_without_ray", "train_ppo", [*PPO, "--vllm_num_engines", "1"],
     "vLLM engines run with alignment.cli.train_ppo_ray", False),
    ("ppo_ray_rollout_tokens_without_dynamic_batch", "train_ppo_ray", [*PPO, "--rollout_max_tokens_per_gpu", "4096"],
     "--rollout_max_tokens_per_gpu is set but --use_dynamic_batch is not", False),
    ("ppo_ray_async_without_engines", "train_ppo_ray", [*PPO, "--async_train"],
     "--async_train overlaps generation on the vLLM engines with training on the actor: add --vllm_num_engines 1",
     False),
    ("ppo_ray_ptx", "train_ppo_ray", [*PPO, "--pretrain_data", "@WORK@/x.jsonl", "--ptx_coef", "0.05"],
     "--pretrain_data: the pre-training (PTX) loss inside PPO is not built", False),
    # negative numbers in any notation reach the check (argparse alone took only -1 and -.5)
    ("ppo_ray_max_steps_negative", "train_ppo_ray", [*PPO, "--max_steps", "-5"], "--max_steps -5: use -1", False),
    # where things are: model, data and output paths
    ("ppo_ray_save_path_ftpx", "train_ppo_ray", [*PPO, "--save_path", "ftpx://h/ppo"], "--save_path ftpx://h/ppo", False),
    # outputs that would replace a file, an input model or the checkpoints (the commit replaces the whole folder)
    ("ppo_ray_missing_prompt_file", "train_ppo_ray", [*PPO, "--prompt_data", "@WORK@/nope.jsonl"],
     "check the --prompt_data path", False),
    # what is in the data files
    ("ppo_ray_wrong_input_key", "train_ppo_ray", [*PPO, "--input_key", "question"], "missing key 'question'", False),
    # a reward_func file, called once before any group is placed (alignment/cli/preflight.py)
    ("ppo_ray_reward_signature", "train_ppo_ray", [*PPO, "--remote_rm_url", "@BAD@/reward_signature.py"],
     "reward_func(queries) cannot be called as reward_func(queries, prompts, labels)", False),
    ("ppo_ray_reward_wrong_length", "train_ppo_ray", [*PPO, "--remote_rm_url", "@BAD@/reward_length.py"],
     "reward_length.py ['rewards']: expected 2 rewards, got 1", False),
    ("ppo_reward_raises", "train_ppo", [*PPO, "--remote_rm_url", "@BAD@/reward_raises.py"],
     "reward_func raised ValueError: no label", False),
    # distillation, LoRA merging, the optimizer
    ("opd_top_p_with_sampled_tokens", "train_opd", ["--pretrain", "@MODEL@", "--teacher_model", "@MODEL@", "--dataset",
                                                    f"{T}/prompts/train.jsonl", "--top_p", "0.9"],
     "--top_p 0.9 with --opd_topk 0: the sampled-token estimator needs samples from the student's whole", False),
    ("opd_sft_flag", "train_opd", ["--pretrain", "@MODEL@", "--teacher_model", "@MODEL@", "--dataset",
                                   f"{T}/prompts/train.jsonl", "--output_key", "output"],
     "--output_key, --multiturn and --pretrain_mode are SFT flags", False),
    # issue 62, item 7: what reached a traceback, a misleading line or a run that trained on nothing
    ("ppo_ray_reward_weights_nan", "train_ppo_ray", [*PPO, "--reward_pretrain", "@MODEL@,@MODEL@", "--reward_weights",
                                                     "1,nan"],
     "--reward_weights '1,nan': every weight must be a finite number", False),
    # already one line, kept so they stay so: what users really type
    ("ppo_ray_n_samples_per_prompt_0", "train_ppo_ray", [*PPO, "--n_samples_per_prompt", "0"],
     "--n_samples_per_prompt 0: must be >= 1", False),
    ("ppo_ray_temperature_negative", "train_ppo_ray", [*PPO, "--temperature", "-1"], "--temperature -1.0: must be > 0",
     False),
    ("ppo_ray_micro_rollout_batch_0", "train_ppo_ray", [*PPO, "--micro_rollout_batch_size", "0"],
     "--micro_rollout_batch_size must be > 0", False),
    # images (docs/vision.md): before any model loads, named with the file and row
    ("ppo_ray_images_critic", "train_ppo_ray", [*VPPO, "--remote_rm_url", f"{T}/reward_func.py",
                                                 "--advantage_estimator", "gae"],
     "a critic is not built for vision-language models", False),
    ("ppo_ray_images_reward_model", "train_ppo_ray", [*VPPO, "--reward_pretrain", "@MODEL@"],
     "a reward model reads the text alone", False),
]
# fmt: on
