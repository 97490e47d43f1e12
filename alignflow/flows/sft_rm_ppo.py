"""The `sft-rm-ppo` flow: SFT → reward model → PPO (or REINFORCE++ / RLOO / GRPO), each stage a
Ray job through the stage runner (skipped when already committed, retried from its checkpoint).

    prefect deployment run 'sft-rm-ppo/tiny' --param ppo='{"advantage_estimator": "rloo", "n_samples_per_prompt": 4}'

Parameters: the recipe (a folder of stage YAMLs: `sft.yaml`, `rm.yaml`, `ppo.yaml`,
alignflow/tasks/orchestration/recipes.py; none: each stage's schema defaults), per stage overrides (any flag name of
that stage), the store URI, the Ray address (none: a local head for this run), the run name. The RM stage trains
from the SFT model; the PPO stage reads both from the store: the policy and reference from SFT, the reward model
(and the critic's initialisation) from RM. Given PPO's reward (`ppo={"reward_pretrain": URI}`, `{"remote_rm_url":
URL or reward_func.py}`), the flow trains no RM.
"""

from typing import Any

from alignflow.tasks.orchestration.flow_run import FlowRun, run_stages
from alignflow.tasks.orchestration.flow_steps import own_reward, sft_steps
from alignflow.tasks.orchestration.params import PPOOverrides, RMOverrides, SFTOverrides, checked_flow, overrides
from alignflow.tasks.orchestration.pipeline import Output, Step
from alignflow.tasks.orchestration.recipes import Recipe
from alignment.config import ConfigError


@checked_flow(name="sft-rm-ppo")
async def sft_rm_ppo_flow(
    run_name: str = "sft-rm-ppo",
    store: str = "runs/store",
    ray_address: str | None = None,
    recipe: str | None = None,
    sft: SFTOverrides | None = None,
    rm: RMOverrides | None = None,
    ppo: PPOOverrides | None = None,
    retries: int = 2,
    heldout_eval: bool = False,
) -> dict[str, Any]:
    """Each stage's result: model URI, skipped or trained, final metrics, wall time; with
    `heldout_eval` (the tiny recipe's before/after check: greedy accuracy on the arithmetic task's
    held-out questions; the tiny deployments switch it on) also the SFT and RL models'
    held-out accuracy. Ends with a report artifact."""
    return await run_stages(
        FlowRun("sft-rm-ppo", run_name, store, recipe, ray_address, retries),
        lambda r: sft_rm_ppo_steps(r, overrides(sft), overrides(rm), overrides(ppo)),
        ("sft", "ppo") if heldout_eval else (),
    )


def sft_rm_ppo_steps(recipe: Recipe, sft: dict, rm: dict, ppo: dict) -> list[Step]:
    """The flow's stages: [tiny_base,] sft, [rm,] ppo. The RM stage only when PPO was given no reward."""
    steps = sft_steps(recipe, sft)
    ppo_inputs: dict = {"pretrain": Output("sft")}
    # a reward model URI, reward server or reward function given to PPO: no RM stage to train
    if not own_reward(recipe.file("ppo"), ppo):
        steps.append(Step("rm", "rm", "rm", rm, {"pretrain": Output("sft")}))
        ppo_inputs["reward_pretrain"] = Output("rm")
    elif rm:  # they would be accepted and never used
        raise ConfigError(
            f"rm overrides ({', '.join(sorted(rm))}) configure the reward model this flow trains, but ppo was given "
            f"its own reward (reward_pretrain, remote_rm_url or agent_func_path), so no RM stage runs: drop the rm "
            f"overrides, or drop ppo's reward to train one"
        )
    steps.append(Step("ppo", "ppo", "ppo", ppo, ppo_inputs))
    return steps
