"""OpenRLHF v0.11.0's own example scripts (examples/scripts/*.sh, tag of 2026-08-13): the `openrlhf.cli.*` line
of each, shell variables expanded as the scripts expand them. What an OpenRLHF user pastes today; tests run them
through the matching alignflow CLI with only paths, sizes and the model changed (tests/test_openrlhf_v011.py)."""

LINES = {
    "serve_remote_rm.sh": (
        "serve_rm",
        '--reward.model_name_or_path OpenRLHF/Llama-3-8b-rm-700k --port 5000 --ds.param_dtype bf16 '
        '--ds.attn_implementation flash_attention_2 --reward.normalize_enable --data.max_len 8192 '
        '--batch_size 16',
    ),
    "train_dapo_ray_hybrid_engine.sh": (
        "train_ppo_ray",
        '--ref.num_nodes 1 --ref.num_gpus_per_node 8 --actor.num_nodes 1 --actor.num_gpus_per_node 8 '
        '--vllm.num_engines 4 --vllm.tensor_parallel_size 2 --train.colocate_all '
        '--vllm.gpu_memory_utilization 0.6 --algo.kl.init_coef 1e-3 --algo.advantage.gamma 1.0 '
        '--algo.kl.use_loss --algo.kl.estimator k3 --algo.advantage.estimator group_norm '
        '--algo.dynamic_filtering_enable --algo.dynamic_filtering_range 0 1 --actor.eps_clip_low_high 0.2 '
        '0.27 --actor.model_name_or_path OpenRLHF/Llama-3-8b-sft-mixture --reward.remote_url '
        '/openrlhf/examples/python/reward_func.py --ckpt.output_dir '
        '/openrlhf/examples/test_scripts/final/llama3-8b-rlhf --ckpt.path '
        '/openrlhf/examples/test_scripts/ckpt/llama3-8b-rlhf --ckpt.save_steps 20 --ckpt.save_hf '
        '--train.micro_batch_size 8 --train.batch_size 128 --rollout.micro_batch_size 16 --rollout.batch_size '
        '128 --rollout.n_samples_per_prompt 8 --train.max_epochs 1 --data.max_len 2048 --data.max_samples '
        '20000 --ds.zero_stage 3 --ds.param_dtype bf16 --actor.adam.lr 5e-7 --data.prompt_dataset '
        'OpenRLHF/prompt-collection-v0.1 --data.input_key context_messages --data.apply_chat_template '
        '--actor.gradient_checkpointing_enable --ds.packing_samples --vllm.sync_backend nccl '
        '--vllm.enforce_eager --vllm.enable_sleep --ds.enable_sleep --algo.advantage.is_correction_enable',
    ),
    "train_dpo_llama.sh": (
        "train_dpo",
        '--ckpt.output_dir ./checkpoint/llama3-8b-dpo --ckpt.save_steps -1 --logger.logging_steps 1 '
        '--eval.steps -1 --train.batch_size 256 --train.micro_batch_size 1 --model.model_name_or_path '
        'OpenRLHF/Llama-3-8b-sft-mixture --ds.param_dtype bf16 --train.max_epochs 1 --data.max_len 8192 '
        '--ds.zero_stage 3 --adam.lr 5e-7 --model.beta 0.1 --data.dataset '
        'OpenRLHF/preference_dataset_mixture2_and_safe_pku --data.apply_chat_template --data.chosen_key '
        'chosen --data.rejected_key rejected --ds.attn_implementation flash_attention_2 --ckpt.load_enable '
        '--ds.packing_samples --model.gradient_checkpointing_enable',
    ),
    "train_ppo_ray_hybrid_engine.sh": (
        "train_ppo_ray",
        '--ref.num_nodes 1 --ref.num_gpus_per_node 8 --reward.num_nodes 1 --reward.num_gpus_per_node 8 '
        '--critic.num_nodes 1 --critic.num_gpus_per_node 8 --actor.num_nodes 1 --actor.num_gpus_per_node 8 '
        '--vllm.num_engines 4 --vllm.tensor_parallel_size 2 --train.colocate_all '
        '--vllm.gpu_memory_utilization 0.5 --actor.model_name_or_path OpenRLHF/Llama-3-8b-sft-mixture '
        '--reward.model_name_or_path OpenRLHF/Llama-3-8b-rm-700k --ckpt.output_dir '
        '/openrlhf/examples/test_scripts/final/llama3-8b-rlhf --ckpt.path '
        '/openrlhf/examples/test_scripts/ckpt/llama3-8b-rlhf --ckpt.save_hf --train.batch_size 128 '
        '--rollout.batch_size 1024 --rollout.n_samples_per_prompt 1 --train.max_epochs 1 --data.max_len 2048 '
        '--data.max_samples 100000 --ds.zero_stage 3 --ds.param_dtype bf16 --actor.adam.lr 5e-7 '
        '--critic.adam.lr 9e-6 --algo.kl.init_coef 0.01 --data.prompt_dataset OpenRLHF/prompt-collection-v0.1 '
        '--data.input_key context_messages --data.apply_chat_template --reward.normalize_enable '
        '--actor.gradient_checkpointing_enable --ds.packing_samples --vllm.sync_backend nccl '
        '--vllm.enforce_eager --vllm.enable_sleep --ds.enable_sleep --train.dynamic_batch_enable '
        '--train.max_tokens_per_gpu 16384 --algo.advantage.is_correction_enable',
    ),
    "train_ppo_ray_slurm.sh": (
        "train_ppo_ray",
        '--ref.num_nodes 1 --ref.num_gpus_per_node 4 --reward.num_nodes 1 --reward.num_gpus_per_node 4 '
        '--critic.num_nodes 1 --critic.num_gpus_per_node 4 --actor.num_nodes 1 --actor.num_gpus_per_node 4 '
        '--vllm.num_engines 4 --vllm.tensor_parallel_size 2 --train.colocate_critic_reward '
        '--train.colocate_actor_ref --actor.model_name_or_path OpenRLHF/Llama-3-8b-sft-mixture '
        '--reward.model_name_or_path OpenRLHF/Llama-3-8b-rm-mixture --ckpt.output_dir '
        '/openrlhf/examples/checkpoint/llama3-8b-rlhf --train.micro_batch_size 8 --train.batch_size 128 '
        '--rollout.micro_batch_size 16 --rollout.batch_size 1024 --data.max_samples 100000 --train.max_epochs '
        '1 --data.max_len 2048 --ds.zero_stage 3 --ds.param_dtype bf16 --actor.adam.lr 5e-7 --critic.adam.lr '
        '9e-6 --algo.kl.init_coef 0.01 --data.prompt_dataset OpenRLHF/prompt-collection-v0.1 --data.input_key '
        'context_messages --data.apply_chat_template --reward.normalize_enable --ds.adam_offload '
        '--ds.packing_samples --vllm.sync_backend nccl --actor.gradient_checkpointing_enable '
        "--logger.wandb.key '{wandb_token}'",
    ),
    "train_ppo_with_reward_fn.sh": (
        "train_ppo_ray",
        '--ref.num_nodes 1 --ref.num_gpus_per_node 2 --critic.num_nodes 1 --critic.num_gpus_per_node 2 '
        '--actor.num_nodes 1 --actor.num_gpus_per_node 2 --vllm.num_engines 2 --vllm.tensor_parallel_size 2 '
        '--train.colocate_actor_ref --actor.model_name_or_path OpenRLHF/Llama-3-8b-sft-mixture '
        '--reward.remote_url /openrlhf/examples/python/reward_func.py --ckpt.output_dir '
        '/openrlhf/examples/checkpoint/llama3-8b-rlhf --train.micro_batch_size 8 --train.batch_size 128 '
        '--rollout.micro_batch_size 16 --rollout.batch_size 1024 --data.max_samples 100000 --train.max_epochs '
        '1 --data.max_len 2048 --ds.zero_stage 3 --ds.param_dtype bf16 --actor.adam.lr 5e-7 --critic.adam.lr '
        '9e-6 --algo.kl.init_coef 0.01 --data.prompt_dataset OpenRLHF/prompt-collection-v0.1 --data.input_key '
        'context_messages --data.apply_chat_template --reward.normalize_enable --ds.packing_samples '
        '--ds.adam_offload --ds.attn_implementation flash_attention_2 --actor.gradient_checkpointing_enable '
        "--logger.wandb.key '{wandb_token}'",
    ),
    "train_prorlv2_math_hybrid_engine.sh": (
        "train_ppo_ray",
        '--ref.num_nodes 1 --ref.num_gpus_per_node 8 --actor.num_nodes 1 --actor.num_gpus_per_node 8 '
        '--vllm.num_engines 8 --vllm.tensor_parallel_size 1 --train.colocate_all '
        '--vllm.gpu_memory_utilization 0.75 --algo.kl.init_coef 1e-4 --algo.advantage.gamma 1.0 '
        '--algo.kl.use_loss --algo.kl.estimator k2 --algo.advantage.estimator reinforce_baseline '
        '--algo.dynamic_filtering_enable --algo.dynamic_filtering_range 0 1 --actor.eps_clip_low_high 0.2 '
        '0.27 --actor.model_name_or_path deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B --reward.remote_url '
        '/openrlhf/examples/python/math_reward_func.py --ckpt.output_dir '
        '/openrlhf/exp/DeepSeek-R1-Qwen-1.5B-PRORLV2 --ckpt.path '
        '/openrlhf/exp/DeepSeek-R1-Qwen-1.5B-PRORLV2/ckpt --ckpt.save_steps 5 --ckpt.save_hf '
        '--train.batch_size 1024 --rollout.batch_size 512 --rollout.n_samples_per_prompt 16 '
        '--train.dynamic_batch_enable --train.num_episodes 100 --data.max_len 9216 --rollout.max_new_tokens '
        '8192 --ds.zero_stage 3 --ds.param_dtype bf16 --actor.adam.lr 1e-6 --data.prompt_dataset '
        'OpenRLHF/dapo-math-17k --data.input_key prompt --data.label_key label --eval.dataset '
        'OpenRLHF/aime-2024 --eval.steps 5 --eval.temperature 1.0 --eval.n_samples_per_prompt 4 '
        '--data.apply_chat_template --actor.gradient_checkpointing_enable --ds.packing_samples '
        '--vllm.sync_backend nccl --vllm.enforce_eager --vllm.enable_sleep --ds.enable_sleep '
        '--algo.advantage.is_correction_enable --algo.advantage.is_correction_threshold 0.5 5.0 '
        '--algo.advantage.is_correction_type icepop --train.max_tokens_per_gpu 32768 '
        '--reward.stop_properly_penalty_coef 0.0',
    ),
    "train_reinforce_baseline_hybrid_engine.sh": (
        "train_ppo_ray",
        '--actor.model_name_or_path Qwen/Qwen3-4B-Thinking-2507 --ckpt.load_enable --ckpt.output_dir '
        '/openrlhf/exp/Qwen3-4B-Thinking --ckpt.path /openrlhf/exp/Qwen3-4B-Thinking/ckpt --ckpt.save_hf '
        '--ckpt.max_num 3 --ckpt.save_steps 10 --train.agent_func_path examples/python/agent_func.py '
        '--data.prompt_dataset zhuzilin/dapo-math-17k --data.input_key prompt --data.label_key label '
        '--data.max_len 74240 --rollout.max_new_tokens 64000 --data.apply_chat_template --ds.packing_samples '
        '--rollout.batch_size 128 --rollout.n_samples_per_prompt 8 --train.batch_size 1024 '
        '--algo.dynamic_filtering_enable --algo.dynamic_filtering_range 0.0 1.0 --train.dynamic_batch_enable '
        '--train.max_tokens_per_gpu 16192 --rollout.max_tokens_per_gpu 32768 --train.micro_batch_size 1 '
        '--rollout.micro_batch_size 8 --data.max_samples 128000 --train.max_epochs 1 --train.num_episodes 1 '
        '--ref.num_nodes 1 --ref.num_gpus_per_node 4 --actor.num_nodes 1 --actor.num_gpus_per_node 4 '
        '--vllm.num_engines 2 --vllm.tensor_parallel_size 2 --vllm.gpu_memory_utilization 0.7 '
        '--train.colocate_all --ds.enable_sleep --vllm.sync_backend nccl --vllm.enforce_eager --ds.zero_stage '
        '3 --actor.gradient_checkpointing_enable --ds.ring_attn_size 2 --ds.ring_attn_head_stride 2 '
        '--ds.param_dtype bf16 --algo.advantage.estimator reinforce_baseline --actor.adam.lr 5e-7 '
        '--actor.entropy_coef 0.0 --algo.kl.init_coef 1e-5 --algo.kl.use_loss --algo.kl.estimator k2 '
        '--algo.advantage.is_correction_enable --algo.advantage.is_correction_type icepop '
        '--logger.tensorboard_dir /openrlhf/exp/Qwen3-4B-Thinking/runs --logger.logging_steps 1 --eval.steps '
        '-1',
    ),
    "train_reinforce_baseline_ray_agent_async.sh": (
        "train_ppo_ray",
        '--actor.model_name_or_path Qwen/Qwen3-4B-Thinking-2507 --ckpt.load_enable --ckpt.output_dir '
        '/openrlhf/exp/Qwen3-4B-Thinking --ckpt.path /openrlhf/exp/Qwen3-4B-Thinking/ckpt --ckpt.save_hf '
        '--ckpt.max_num 3 --ckpt.save_steps 10 --train.agent_func_path examples/python/agent_func.py '
        '--data.prompt_dataset zhuzilin/dapo-math-17k --data.input_key prompt --data.label_key label '
        '--data.max_len 74240 --rollout.max_new_tokens 64000 --data.apply_chat_template --ds.packing_samples '
        '--rollout.batch_size 128 --rollout.n_samples_per_prompt 8 --train.batch_size 1024 '
        '--algo.dynamic_filtering_enable --algo.dynamic_filtering_range 0.0 1.0 --train.dynamic_batch_enable '
        '--train.max_tokens_per_gpu 16192 --rollout.max_tokens_per_gpu 32768 --train.micro_batch_size 1 '
        '--rollout.micro_batch_size 8 --data.max_samples 128000 --train.max_epochs 1 --train.num_episodes 1 '
        '--train.async_enable --train.partial_rollout_enable --ref.num_nodes 1 --ref.num_gpus_per_node 4 '
        '--actor.num_nodes 1 --actor.num_gpus_per_node 4 --vllm.num_engines 2 --vllm.tensor_parallel_size 2 '
        '--vllm.gpu_memory_utilization 0.95 --train.colocate_all --ds.enable_sleep --vllm.sync_backend nccl '
        '--vllm.enforce_eager --ds.zero_stage 3 --actor.gradient_checkpointing_enable --ds.ring_attn_size 2 '
        '--ds.ring_attn_head_stride 2 --ds.param_dtype bf16 --algo.advantage.estimator reinforce_baseline '
        '--actor.adam.lr 5e-7 --actor.entropy_coef 0.0 --algo.kl.init_coef 1e-5 --algo.kl.use_loss '
        '--algo.kl.estimator k2 --algo.advantage.is_correction_enable --algo.advantage.is_correction_type '
        'icepop --logger.tensorboard_dir /openrlhf/exp/Qwen3-4B-Thinking/runs --logger.logging_steps 1 '
        '--eval.steps -1',
    ),
    "train_rm.sh": (
        "train_rm",
        '--ckpt.output_dir ./checkpoint/llama3-8b-rm --ckpt.save_steps -1 --logger.logging_steps 1 '
        '--eval.steps -1 --train.batch_size 256 --train.micro_batch_size 1 --model.model_name_or_path '
        'OpenRLHF/Llama-3-8b-sft-mixture --ds.param_dtype bf16 --train.max_epochs 1 --data.max_len 8192 '
        '--ds.zero_stage 3 --adam.lr 9e-6 --data.dataset OpenRLHF/preference_dataset_mixture2_and_safe_pku '
        '--data.apply_chat_template --data.chosen_key chosen --data.rejected_key rejected '
        '--ds.attn_implementation flash_attention_2 --ckpt.load_enable --ds.packing_samples '
        '--model.gradient_checkpointing_enable',
    ),
    "train_sft.sh": (
        "train_sft",
        '--data.max_len 2048 --data.dataset Open-Orca/OpenOrca --data.input_key question --data.output_key '
        'response --train.batch_size 256 --train.micro_batch_size 2 --data.max_samples 500000 '
        '--model.model_name_or_path meta-llama/Meta-Llama-3-8B --ckpt.output_dir ./checkpoint/llama3-8b-sft '
        '--ckpt.save_steps -1 --logger.logging_steps 1 --eval.steps -1 --ds.zero_stage 2 --train.max_epochs 1 '
        '--ds.param_dtype bf16 --ds.attn_implementation flash_attention_2 --adam.lr 5e-6 --ckpt.load_enable '
        '--ds.packing_samples --model.gradient_checkpointing_enable',
    ),
    "train_sft_mixtral_lora.sh": (
        "train_sft",
        '--data.max_len 2048 --data.dataset Open-Orca/OpenOrca --data.input_key question --data.output_key '
        'response --train.batch_size 128 --train.micro_batch_size 4 --data.max_samples 500000 '
        '--model.model_name_or_path mistralai/Mixtral-8x7B-v0.1 --ckpt.output_dir '
        './checkpoint/mixtral-sft-lora --ckpt.save_steps -1 --logger.logging_steps 1 --eval.steps -1 '
        '--ds.zero_stage 3 --train.max_epochs 1 --ds.param_dtype bf16 --model.gradient_checkpointing_enable '
        '--ds.attn_implementation flash_attention_2 --adam.lr 5e-6 --ds.lora.rank 64 --ds.lora.alpha 64 '
        '--ds.packing_samples --model.aux_loss_coef 0.001',
    ),
    "train_vlm_math_hybrid_engine.sh": (
        "train_ppo_ray",
        '--ref.num_nodes 1 --ref.num_gpus_per_node 4 --actor.num_nodes 1 --actor.num_gpus_per_node 4 '
        '--vllm.num_engines 4 --vllm.tensor_parallel_size 1 --train.colocate_all '
        '--vllm.gpu_memory_utilization 0.7 --algo.kl.init_coef 0 --algo.advantage.gamma 1.0 '
        '--algo.kl.use_loss --algo.kl.estimator k2 --algo.advantage.estimator reinforce_baseline '
        '--actor.model_name_or_path Qwen/Qwen3.5-2B --reward.remote_url '
        '/openrlhf/examples/python/math_reward_func.py --ckpt.output_dir /openrlhf/exp/Qwen3.5-2B-VLM-RLHF '
        '--ckpt.path /openrlhf/exp/Qwen3.5-2B-VLM-RLHF/ckpt --ckpt.save_hf --ckpt.save_steps 5 --eval.steps '
        '-1 --train.micro_batch_size 1 --rollout.micro_batch_size 1 --train.batch_size 1024 '
        '--rollout.batch_size 128 --rollout.n_samples_per_prompt 8 --train.num_episodes 100 --data.max_len '
        '4096 --rollout.max_new_tokens 2048 --ds.zero_stage 3 --ds.param_dtype bf16 --actor.adam.lr 2e-6 '
        '--data.prompt_dataset hiyouga/geometry3k --data.input_key prompt --data.label_key label '
        '--data.image_key images --data.max_images_per_prompt 1 --actor.freeze_visual_encoder '
        '--data.apply_chat_template --actor.gradient_checkpointing_enable --ds.attn_implementation eager '
        '--vllm.sync_backend nccl --vllm.enforce_eager --vllm.enable_sleep --ds.enable_sleep',
    ),
}
