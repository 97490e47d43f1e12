"""The `sft-grpo` flow: SFT → RL with a verifiable reward (a `reward_func` file or server, or a multi-turn
agent environment) and no reward model — the DeepSeek-R1-Zero / TRL GRPO shape.

    prefect deployment run 'sft-grpo/tiny'
    prefect deployment run 'sft-grpo/tiny-agent'      # the same RL stage through data/tiny/agent_retry.py

Parameters: the recipe (its `sft.yaml` and `grpo.yaml`; `grpo` runs `alignment.cli.train_ppo_ray`, so any PPO
flag applies: `--advantage_estimator`, `--dynamic_filtering`, `--agent_func_path`, ...), per stage overrides,
the store URI, the Ray address, the run name, and `heldout_eval` (the tiny world's greedy accuracy before and
after RL, in the report).
"""

from typing import Any

from alignflow.tasks.orchestration.flow_run import FlowRun, run_stages
from alignflow.tasks.orchestration.flow_steps import own_reward, sft_steps
from alignflow.tasks.orchestration.params import PPOOverrides, SFTOverrides, checked_flow, overrides
from alignflow.tasks.orchestration.pipeline import Output, Step
from alignflow.tasks.orchestration.recipes import Recipe
from alignment.config import ConfigError


@checked_flow(name="sft-grpo")
async def sft_grpo_flow(
    run_name: str = "sft-grpo",
    store: str = "runs/store",
    ray_address: str | None = None,
    recipe: str | None = None,
    sft: SFTOverrides | None = None,
    grpo: PPOOverrides | None = None,
    retries: int = 2,
    heldout_eval: bool = False,
) -> dict[str, Any]:
    """Each stage's result (model URI, skipped or trained, final metrics, wall time); with `heldout_eval` also
    the SFT and RL models' held-out accuracy. Ends with a report artifact."""
    return await run_stages(
        FlowRun("sft-grpo", run_name, store, recipe, ray_address, retries),
        lambda r: sft_grpo_steps(r, overrides(sft), overrides(grpo)),
        ("sft", "grpo") if heldout_eval else (),
    )


def sft_grpo_steps(recipe: Recipe, sft: dict, grpo: dict) -> list[Step]:
    """[tiny_base,] sft, grpo. The RL stage must bring its own reward: no RM is trained here."""
    if not own_reward(recipe.file("grpo"), grpo):
        raise ConfigError(
            "sft-grpo trains no reward model: give grpo a remote_rm_url (a reward_func .py file or a "
            "server) or an agent_func_path, in the recipe's grpo.yaml or the grpo parameter; for a "
            "trained RM use the sft-rm-ppo flow"
        )
    return sft_steps(recipe, sft) + [Step("grpo", "ppo", "grpo", grpo, {"pretrain": Output("sft")})]
