"""The `sft-grpo` flow: SFT → RL with a verifiable reward (a `reward_func` file or server, or a multi-turn
agent environment) and no reward model — the DeepSeek-R1-Zero / TRL GRPO shape.

    prefect deployment run 'sft-grpo/tiny'
    prefect deployment run 'sft-grpo/tiny-agent'      # the same RL stage through alignflow/data/tiny/agent_retry.py

Parameters: the recipe (its `sft.yaml` and `grpo.yaml`; `grpo` runs `alignment.cli.train_ppo_ray`, so any PPO
flag applies: `--advantage_estimator`, `--dynamic_filtering`, `--agent_func_path`, ...), per stage overrides,
the store URI, the Ray address, the run name, and `heldout_eval` (the tiny world's greedy accuracy before and
after RL, in the report).
"""

import time
from typing import Any

from alignflow.flows.sft import makes_base
from alignflow.tasks import pipeline
from alignflow.tasks.evaluate import evaluate_heldout
from alignflow.tasks.params import PPOOverrides, SFTOverrides, checked_flow, overrides
from alignflow.tasks.pipeline import Output, Step
from alignflow.tasks.ray_cluster import ray_cluster
from alignflow.tasks.recipes import Recipe, load_recipe
from alignflow.tasks.report import build_report, publish_report
from alignflow.tasks.stage import stage_runner
from alignflow.tasks.stage_spec import check_store, check_store_reachable

from alignment.config import ConfigError


@checked_flow(name="sft-grpo")
async def sft_grpo_flow(run_name: str = "sft-grpo", store: str = "runs/store", ray_address: str | None = None,
                        recipe: str | None = None, sft: SFTOverrides | None = None, grpo: PPOOverrides | None = None,
                        retries: int = 2, heldout_eval: bool = False) -> dict[str, Any]:
    """Each stage's result (model URI, skipped or trained, final metrics, wall time); with `heldout_eval` also
    the SFT and RL models' held-out accuracy. Ends with a report artifact."""
    started = time.monotonic()
    store = check_store_reachable(check_store(store))
    recipe_ = load_recipe(recipe)
    steps = sft_grpo_steps(recipe_, overrides(sft), overrides(grpo))
    planned = pipeline.plan(steps, recipe_, store, run_name)
    await pipeline.publish_configs("sft-grpo", run_name, recipe_, planned)
    with ray_cluster(ray_address) as cluster:
        results = {name: r async for name, r in pipeline.run(planned, stage_runner(retries), store, run_name, cluster)}
        summaries = {name: r.summary() for name, r in results.items()}
        if heldout_eval:
            for name in ("sft", "grpo"):
                summaries[name]["heldout"] = await evaluate_heldout(name, results[name].model_uri, run_name, cluster)
    report = build_report("sft-grpo", run_name, summaries, time.monotonic() - started)
    await publish_report(report)
    return summaries


def sft_grpo_steps(recipe: Recipe, sft: dict, grpo: dict) -> list[Step]:
    """[tiny_base,] sft, grpo. The RL stage must bring its own reward: no RM is trained here."""
    from alignflow.flows.sft_rm_ppo import own_reward
    if not own_reward(recipe.file("grpo"), grpo):
        raise ConfigError("sft-grpo trains no reward model: give grpo a remote_rm_url (a reward_func .py file or a "
                          "server) or an agent_func_path, in the recipe's grpo.yaml or the grpo parameter; for a "
                          "trained RM use the sft-rm-ppo flow")
    steps = [Step("sft", "sft", "sft", sft)]
    if makes_base(recipe, sft):
        steps = [Step("tiny_base", "tiny_base", "tiny_base"),
                 Step("sft", "sft", "sft", sft, {"pretrain": Output("tiny_base")})]
    return steps + [Step("grpo", "ppo", "grpo", grpo, {"pretrain": Output("sft")})]
