"""python -m alignment.cli.train_ppo_ray: the PPO family on Ray — OpenRLHF's train_ppo_ray.

Run it as a Ray job (`ray job submit -- python -m alignment.cli.train_ppo_ray ...`, or through
the stage runner); run directly, it starts a local Ray instance. The loop is in
`alignment.ppo.ray_driver`; the per-model code is the same as `alignment.cli.train_ppo`'s.
"""
from __future__ import annotations

from alignment.cli.common import run_main
from alignment.cli.train_ppo import refuse_unbuilt
from alignment.config import ConfigError, PPOConfig, parse_args


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(PPOConfig, argv, prog="alignment.cli.train_ppo_ray")
    if cfg.vllm_num_engines:
        raise ConfigError("--vllm_num_engines: vLLM rollout engines are not implemented yet; use 0 (the HF engine "
                          "inside each actor rank)")
    refuse_unbuilt(cfg)
    from alignment.ppo.ray_driver import run
    return run(cfg)


if __name__ == "__main__":
    run_main(main)
