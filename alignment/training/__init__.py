"""What every training loop shares (the SFT/RM/DPO/KTO trainers and PPO alike): the DeepSpeed engine and its
step, resumable checkpoints, the save schedule, metric tracking (wandb, TensorBoard, the metrics file) and
the micro-batch sampler. Above models/ and distributed/, below trainers/ and ppo/."""
