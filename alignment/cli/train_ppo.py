"""python -m alignment.cli.train_ppo (or `deepspeed --module alignment.cli.train_ppo`): the PPO
family with every model in this process group and HF generation — OpenRLHF's train_ppo.

One iteration is `alignment.ppo.controller.PPOController.step` on the in-process backend
(`alignment.ppo.local.LocalGroups`); the controller and the loop (logging, --save_steps
checkpoints, --load_checkpoint, `alignment.ppo.loop`) are train_ppo_ray's too.
vLLM engines run with train_ppo_ray only.
"""

from __future__ import annotations

import dataclasses
import logging

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs, check_reward_file
from alignment.config import ConfigError, PPOConfig, parse_args
from alignment.config.base import public_dict
from alignment.config.placement import PlacementConfig
from alignment.config.sleep import SleepConfig

log = logging.getLogger("alignment.train_ppo")


def refuse_unbuilt(cfg: PPOConfig) -> None:
    """PPO features whose flags parse but whose code is not written yet: refused, never ignored."""
    if cfg.eval_dataset:
        raise ConfigError(
            "--eval_dataset: periodic evaluation inside PPO is not implemented yet; drop it and "
            "score the committed model afterwards (e.g. python -m alignment.cli.eval_tiny)"
        )


def refuse_ray_only(cfg: PPOConfig) -> None:
    """Placement and vLLM engines belong to train_ppo_ray; here every model runs on each of the
    launcher's ranks, so such a flag would be accepted and ignored: refused in one line instead."""
    if cfg.vllm_num_engines:
        raise ConfigError(
            "--vllm_num_engines: vLLM engines run with alignment.cli.train_ppo_ray; "
            "train_ppo generates with HF (drop the flag)"
        )
    moved = [
        f"--{f.name} {getattr(cfg, f.name)}"
        for f in dataclasses.fields(PlacementConfig) + dataclasses.fields(SleepConfig)
        if getattr(cfg, f.name) != f.default
    ]
    if moved:
        raise ConfigError(
            f"{' '.join(moved)}: placement and sleep flags work with alignment.cli.train_ppo_ray; under "
            f"train_ppo every model runs on each launcher rank (size it with deepspeed --num_gpus or "
            f"torchrun --nproc_per_node) — drop them or use train_ppo_ray"
        )


def build_models(cfg: PPOConfig, rt, setup, total_steps: int):
    """(actor engine, critic engine or None, the critic's value scale, frozen reference or None)."""
    from alignment.models.builder import load_actor, load_value_model
    from alignment.models.loading import load_causal_lm, resolve_model_path
    from alignment.models.reward_model import critic_value_scale
    from alignment.ppo.experience import uses_reference
    from alignment.training.engine import build_engine

    actor = build_engine(
        load_actor(setup, cfg),
        dataclasses.replace(cfg, learning_rate=cfg.actor_learning_rate),
        rt,
        setup.precision.bf16,
        total_steps,
    )
    critic, critic_scale = None, None
    if cfg.uses_critic():
        source = cfg.critic_pretrain or (cfg.reward_pretrain.split(",")[0] if cfg.reward_pretrain else cfg.pretrain)
        critic_setup = dataclasses.replace(setup, path=resolve_model_path(source, "--critic_pretrain"))
        critic = build_engine(
            load_value_model(critic_setup, cfg),
            dataclasses.replace(cfg, learning_rate=cfg.critic_learning_rate),
            rt,
            setup.precision.bf16,
            total_steps,
        )
        critic_scale = critic_value_scale(critic_setup.path, cfg.normalize_reward)
    ref = None
    if uses_reference(cfg):  # else no KL term: the reference is never loaded (its memory and forward saved)
        ref_device = "cpu" if cfg.ref_reward_offload else rt.device
        ref = (
            load_causal_lm(setup.path, setup.precision.dtype, setup.attn, trust_remote_code=setup.trust_remote_code)
            .to(ref_device)
            .eval()
            .requires_grad_(False)
        )
    return actor, critic, critic_scale, ref


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(PPOConfig, argv, prog="alignment.cli.train_ppo")
    refuse_ray_only(cfg)
    refuse_unbuilt(cfg)
    check_outputs(cfg)
    check_reward_file(cfg)
    from alignment.datasets.prompts import load_prompts
    from alignment.distributed.collectives import barrier
    from alignment.distributed.runtime import init_runtime
    from alignment.models.builder import prepare
    from alignment.models.saving import commit_model, lora_save, save_hf_model
    from alignment.outputs import StagedOutput
    from alignment.ppo.controller import PPOController, check_sizes, iterations_per_episode
    from alignment.ppo.local import LocalGroups
    from alignment.ppo.loop import run_iterations
    from alignment.ppo.packed import packing_for
    from alignment.rewards.scorer import make_reward
    from alignment.training.checkpoint import check_world_size
    from alignment.training.tracking import MetricsLogger

    rt = init_runtime(cfg.local_rank, cfg.num_threads)
    steps_per_iteration = check_sizes(cfg, rt.world_size)
    if cfg.load_checkpoint:  # before any weights load
        check_world_size(cfg.ckpt_path, rt.world_size)
    setup = prepare(cfg, rt)
    prompts = load_prompts(cfg, setup.tokenizer, cfg.prompt_data, cfg.prompt_split)
    reward = (
        None
        if cfg.agent_func_path
        else make_reward(  # an agent's environment gives the rewards
            cfg, setup.tokenizer, setup.precision.dtype, setup.attn, "cpu" if cfg.ref_reward_offload else rt.device
        )
    )
    trainer_iters = cfg.num_episodes * iterations_per_episode(len(prompts), cfg.rollout_batch_size)
    total = trainer_iters * steps_per_iteration
    log.info(
        "PPO (%s): %d prompts, %d iterations of %d prompts x %d samples, %d optimizer steps per engine, "
        "world size %d, %s",
        cfg.advantage_estimator,
        len(prompts),
        trainer_iters,
        cfg.rollout_batch_size,
        cfg.n_samples_per_prompt,
        total,
        rt.world_size,
        setup.precision.label,
    )
    actor, critic, critic_scale, ref = build_models(cfg, rt, setup, total)
    groups = LocalGroups(cfg, rt, actor, critic, ref, reward, setup.tokenizer, critic_scale, packing_for(cfg, setup))
    ppo = PPOController(cfg, groups, setup.tokenizer, prompts)

    # built here, committed over --save_path at the end: a committed model there stays intact until then
    with StagedOutput(cfg.save_path, writes=rt.is_main) as out:
        start = groups.resume()
        logger = MetricsLogger(
            cfg, out.dir, rt.is_main, ppo.total_iterations, "ppo", cfg.rollout_batch_size * cfg.n_samples_per_prompt
        )
        run_iterations(cfg, ppo.total_iterations, ppo, logger, groups.save, start)
        if groups.ema is not None and out.dir is not None:  # --enable_ema: the average, beside the actor
            save_hf_model(
                actor.module, groups.ema.state_dict(actor.module), setup.tokenizer, out.dir / "ema", lora=lora_save(cfg)
            )
        commit_model(
            out,
            actor,
            setup.tokenizer,
            {"stage": "ppo", "config": public_dict(cfg), "final_metrics": logger.final(), "tracking": logger.links},
            lora=lora_save(cfg),
            cfg=cfg,
        )
    barrier()
    logger.close()
    return logger.final()


if __name__ == "__main__":
    run_main(main)
