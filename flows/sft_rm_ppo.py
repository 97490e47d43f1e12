"""The `sft-rm-ppo` flow: SFT → reward model → PPO (or REINFORCE++ / RLOO / GRPO), each stage a
Ray job through the stage runner (skipped when already committed, retried from its checkpoint).

    prefect deployment run 'sft-rm-ppo/tiny' --param ppo='{"advantage_estimator": "rloo", "n_samples_per_prompt": 4}'

Parameters: the recipe (a folder of stage YAMLs: `sft.yaml`, `rm.yaml`, `ppo.yaml`, tasks/recipes.py;
none: each stage's schema defaults), per stage overrides (any flag name of that stage), the store
URI, the Ray address (none: a local head for this run), the run name. The RM stage trains from the SFT model; the PPO stage reads both from the store: the
policy and reference from SFT, the reward model (and the critic's initialisation) from RM. Given
PPO's reward (`ppo={"reward_pretrain": URI}`, `{"remote_rm_url": URL or reward_func.py}`), the flow
trains no RM.
"""

import time
from typing import Any


from alignflow.tasks.params import PPOOverrides, RMOverrides, SFTOverrides, checked_flow, overrides
from alignflow.flows.sft import makes_base
from alignflow.tasks.evaluate import heldout_accuracy
from alignflow.tasks.ray_cluster import ray_cluster
from alignflow.tasks.recipes import StagePlan, load_recipe
from alignflow.tasks.report import build_report, publish_report
from alignflow.tasks.stage import stage_runner
from alignflow.tasks.stage_spec import StageResult, check_store, check_store_reachable


@checked_flow(name="sft-rm-ppo")
async def sft_rm_ppo_flow(run_name: str = "sft-rm-ppo", store: str = "runs/store", ray_address: str | None = None,
                          recipe: str | None = None, sft: SFTOverrides | None = None, rm: RMOverrides | None = None,
                          ppo: PPOOverrides | None = None, retries: int = 2,
                          heldout_eval: bool = False) -> dict[str, Any]:
    """Each stage's result: model URI, skipped or trained, final metrics, wall time; with
    `heldout_eval` (the tiny recipe's before/after check: greedy accuracy on the arithmetic task's
    held-out questions; the tiny deployments switch it on) also the SFT and RL models'
    held-out accuracy. Ends with a report artifact."""
    started = time.monotonic()
    # Every config is validated before a cluster starts (upstream outputs stand in as placeholders).
    store = check_store_reachable(check_store(store))
    plan = StagePlan(load_recipe(recipe))
    files = plan.recipe.file
    sft, rm, ppo = overrides(sft), overrides(rm), overrides(ppo)
    needs_base = makes_base(plan.recipe, sft)
    # a reward model URI, reward server or reward function given to PPO: no RM stage to train
    train_rm = not own_reward(files("ppo"), ppo)
    if needs_base:
        plan.check("tiny_base", "tiny_base", {})
    plan.check("sft", "sft", {**({"pretrain": "<tiny_base output>"} if needs_base else {}), **sft})
    if train_rm:
        plan.check("rm", "rm", {**rm, "pretrain": "<sft output>"})
    plan.check("ppo", "ppo", {**ppo, "pretrain": "<sft output>",
                              **({"reward_pretrain": "<rm output>"} if train_rm else {})})
    await plan.publish("sft-rm-ppo", run_name)
    results: dict[str, StageResult] = {}
    with ray_cluster(ray_address) as cluster:
        run = stage_runner(retries)
        sft_inputs = {}
        if needs_base:
            results["tiny_base"] = await run("tiny_base", store, run_name, cluster, files("tiny_base"))
            sft_inputs["pretrain"] = results["tiny_base"].model_uri
        results["sft"] = await run("sft", store, run_name, cluster, files("sft"), sft, sft_inputs)
        ppo_inputs = {"pretrain": results["sft"].model_uri}
        if train_rm:
            results["rm"] = await run("rm", store, run_name, cluster, files("rm"), rm,
                                      {"pretrain": results["sft"].model_uri})
            ppo_inputs["reward_pretrain"] = results["rm"].model_uri
        results["ppo"] = await run("ppo", store, run_name, cluster, files("ppo"), ppo, ppo_inputs)
        summaries = {name: r.summary() for name, r in results.items()}
        if heldout_eval:
            for name in ("sft", "ppo"):
                summaries[name]["heldout"] = await heldout_accuracy(name, results[name].model_uri, run_name, cluster.address)
    report = build_report("sft-rm-ppo", run_name, summaries, time.monotonic() - started)
    await publish_report(report)
    return summaries


def own_reward(ppo_config_file: str | None, ppo: dict) -> bool:
    """PPO was given its reward (`reward_pretrain` or `remote_rm_url`, in the overrides or the config file)."""
    from alignment.config import PPOConfig, load_yaml

    configured = load_yaml(PPOConfig, ppo_config_file) if ppo_config_file else {}
    return any(ppo.get(k) or configured.get(k) for k in ("reward_pretrain", "remote_rm_url"))
