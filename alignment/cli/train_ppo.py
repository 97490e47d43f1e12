"""python -m alignment.cli.train_ppo (or `deepspeed --module alignment.cli.train_ppo`): the PPO
family with every model in this process group and HF generation — OpenRLHF's train_ppo.

The run is `alignment.ppo.run` (setup → train → commit) on the in-process backend
(`alignment.ppo.local.LocalGroups`); the run, the controller and the loop (logging, --save_steps
checkpoints, --load_checkpoint) are train_ppo_ray's too.
vLLM engines run with train_ppo_ray only.
"""

from __future__ import annotations

import logging

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs, check_reward_file
from alignment.config import ConfigError, PPOConfig, parse_args
from alignment.config.placement import PlacementActor, PlacementCritic, PlacementRef, PlacementReward, PlacementTrain
from alignment.config.sleep import SleepDS, SleepVLLM
from alignment.config.tree import flat_names

log = logging.getLogger("alignment.train_ppo")


# the flags of placement and sleep: what only train_ppo_ray does
RAY_ONLY = flat_names(
    PlacementActor, PlacementCritic, PlacementRef, PlacementReward, PlacementTrain, SleepVLLM, SleepDS
)


def refuse_ray_only(cfg: PPOConfig) -> None:
    """Placement and vLLM engines belong to train_ppo_ray; here every model runs on each of the
    launcher's ranks, so such a flag would be accepted and ignored: refused in one line instead."""
    if cfg.vllm.num_engines:
        raise ConfigError(
            "--vllm_num_engines: vLLM engines run with alignment.cli.train_ppo_ray; "
            "train_ppo generates with HF (drop the flag)"
        )
    defaults = PPOConfig()
    moved = [f"--{name} {getattr(cfg, name)}" for name in RAY_ONLY if getattr(cfg, name) != getattr(defaults, name)]
    if moved:
        raise ConfigError(
            f"{' '.join(moved)}: placement and sleep flags work with alignment.cli.train_ppo_ray; under "
            f"train_ppo every model runs on each launcher rank (size it with deepspeed --num_gpus or "
            f"torchrun --nproc_per_node) — drop them or use train_ppo_ray"
        )


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(PPOConfig, argv, prog="alignment.cli.train_ppo")
    refuse_ray_only(cfg)
    check_outputs(cfg)
    check_reward_file(cfg)
    # lazy: the launcher's ranks all run this; the imports below load torch, transformers and DeepSpeed
    from alignment.distributed.runtime import init_runtime
    from alignment.models.builder import prepare
    from alignment.models.moe import moe_top_k
    from alignment.ppo import roles, run
    from alignment.ppo.experience import uses_reference
    from alignment.ppo.local import LocalGroups
    from alignment.ppo.packed import packing_for
    from alignment.training.resume_point import check_world_size
    from alignment.training.run_identity import RunIdentity

    # --ds_tensor_parallel_size: each rank's controller works for its data-parallel replica (ppo/local.py)
    rt = init_runtime(cfg.train.local_rank, cfg.train.num_threads).tensor_parallel(cfg.ds.tensor_parallel_size)
    if cfg.ckpt.load_enable:  # before any weights load
        check_world_size(cfg.ckpt.path, rt.world_size, RunIdentity.of(cfg))
    setup = prepare(cfg, rt)
    s = run.setup(cfg, setup.tokenizer, rt.dp_size)
    top_k = moe_top_k(setup.path, cfg.model.aux_loss_coef, setup.trust_remote_code)  # a dense actor: refused here
    # an agent's environment rewards
    reward = None if cfg.train.agent_func_path else roles.reward(cfg, setup, rt.device)
    total = s.sizes.total_steps
    log.info("world size %d, %s, %d optimizer steps per engine", rt.world_size, setup.precision.label, total)
    actor = roles.actor(cfg, rt, setup, total)
    critic, critic_scale = roles.critic(cfg, rt, setup, total) if cfg.uses_critic() else (None, None)
    # without a KL term the reference is never loaded (its memory and forward saved)
    ref = roles.reference(cfg.ref, setup, rt.device) if uses_reference(cfg.algo) else None
    packing = packing_for(cfg.ds, setup)
    groups = LocalGroups(cfg, rt, actor, critic, ref, reward, setup.tokenizer, critic_scale, packing, top_k)
    return run.run(cfg, s, groups)


if __name__ == "__main__":
    run_main(main)
