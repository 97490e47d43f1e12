"""python -m alignment.cli.train_ppo (or `deepspeed --module alignment.cli.train_ppo`): the PPO
family with every model in this process group and HF generation — OpenRLHF's train_ppo.

The loop is `alignment.ppo.trainer.PPOTrainer`, the same one the Ray actors will run.
Not yet supported here: resumable PPO checkpoints (--save_steps/--load_checkpoint), vLLM engines.
"""
from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path

from alignment.cli.common import run_main
from alignment.config import ConfigError, PPOConfig, parse_args
from alignment.config.base import public_dict

log = logging.getLogger("alignment.train_ppo")


def refuse_unbuilt(cfg: PPOConfig) -> None:
    """PPO features whose flags parse but whose code is not written yet: refused, never ignored."""
    if cfg.eval_dataset:
        raise ConfigError("--eval_dataset: periodic evaluation inside PPO is not implemented yet; drop it and "
                          "score the committed model afterwards (e.g. python -m alignment.cli.eval_tiny)")
    if cfg.load_checkpoint or cfg.save_steps > 0:
        raise ConfigError("--save_steps/--load_checkpoint: resumable PPO checkpoints are not implemented yet; "
                          "drop them (the final model is still committed)")


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(PPOConfig, argv, prog="alignment.cli.train_ppo")
    if cfg.vllm_num_engines:
        raise ConfigError("--vllm_num_engines: vLLM engines run with alignment.cli.train_ppo_ray; "
                          "train_ppo generates with HF (drop the flag)")
    refuse_unbuilt(cfg)
    import tempfile

    import torch.distributed as dist

    from alignment import storage
    from alignment.datasets.prompts import load_prompts
    from alignment.distributed.runtime import init_runtime
    from alignment.models.builder import load_actor, load_value_model, prepare
    from alignment.models.loading import load_causal_lm, resolve_model_path
    from alignment.models.saving import full_state_dict, save_hf_model
    from alignment.ppo.trainer import PPOTrainer, check_sizes
    from alignment.rewards.scorer import make_reward
    from alignment.trainers.engine import build_engine
    from alignment.trainers.tracking import MetricsLogger

    rt = init_runtime(cfg.local_rank, cfg.num_threads)
    steps_per_iteration = check_sizes(cfg, rt.world_size)
    setup = prepare(cfg, rt)
    prompts = load_prompts(cfg, setup.tokenizer, cfg.prompt_data, cfg.prompt_split)
    reward = make_reward(cfg, setup.tokenizer, setup.precision.dtype, setup.attn,
                         "cpu" if cfg.ref_reward_offload else rt.device)
    trainer_iters = cfg.num_episodes * max(1, len(prompts) // cfg.rollout_batch_size)
    total = trainer_iters * steps_per_iteration
    log.info("PPO (%s): %d prompts, %d iterations of %d prompts x %d samples, %d optimizer steps per engine, "
             "world size %d, %s", cfg.advantage_estimator, len(prompts), trainer_iters, cfg.rollout_batch_size,
             cfg.n_samples_per_prompt, total, rt.world_size, setup.precision.label)
    actor = build_engine(load_actor(setup, cfg), dataclasses.replace(cfg, learning_rate=cfg.actor_learning_rate),
                         rt, setup.precision.bf16, total)
    critic = None
    if cfg.advantage_estimator == "gae":
        source = cfg.critic_pretrain or (cfg.reward_pretrain.split(",")[0] if cfg.reward_pretrain else cfg.pretrain)
        critic_setup = dataclasses.replace(setup, path=resolve_model_path(source, "--critic_pretrain"))
        critic = build_engine(load_value_model(critic_setup, cfg),
                              dataclasses.replace(cfg, learning_rate=cfg.critic_learning_rate),
                              rt, setup.precision.bf16, total)
    ref_device = "cpu" if cfg.ref_reward_offload else rt.device
    ref = load_causal_lm(setup.path, setup.precision.dtype, setup.attn).to(ref_device).eval().requires_grad_(False)
    trainer = PPOTrainer(cfg, rt, actor, critic, ref, reward, setup.tokenizer, prompts)

    local = not storage.is_remote(cfg.save_path)
    run_dir = Path(cfg.save_path.removeprefix("file://")) if local else Path(tempfile.mkdtemp(prefix="alignflow-save-"))
    if rt.is_main:
        storage.remove(f"{cfg.save_path.rstrip('/')}/{storage.MANIFEST}")
    logger = MetricsLogger(cfg, run_dir, rt.is_main, trainer.total_iterations, "ppo")
    for it in range(trainer.total_iterations):
        metrics = trainer.step(it)
        logger.advance()
        if (it + 1) % cfg.logging_steps == 0 or it + 1 == trainer.total_iterations:
            logger.log(it + 1, {f"train/{k}": v for k, v in metrics.items()})
    state = full_state_dict(actor)
    if rt.is_main:
        save_hf_model(actor.module, state, setup.tokenizer, run_dir)
        final = logger.history[-1] if logger.history else {}
        storage.commit_dir(run_dir, cfg.save_path,
                           metadata={"stage": "ppo", "config": public_dict(cfg), "final_metrics": final})
        if not local:
            shutil.rmtree(run_dir, ignore_errors=True)
        log.info("model committed: %s", cfg.save_path)
    if dist.is_initialized():
        dist.barrier()
    logger.close()
    return logger.history[-1] if logger.history else {}


if __name__ == "__main__":
    run_main(main)
