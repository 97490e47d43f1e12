"""The loop shared by the round-based flows (iterative DPO, rejection sampling): each round
generates data with the current policy (a batch_inference stage), trains the next policy on it
(a DPO or SFT stage whose `dataset` is that data and whose `pretrain` is the current policy),
then advances the policy pointer in the store.

"The current policy" is the pointer's model when the run has one, so scheduled runs continue
from the previous run's last committed round; the pointer moves only after a round's model is
committed, so a failed round is redone from the same policy next time.
"""
from __future__ import annotations

import time
from prefect import get_run_logger

from alignment.config import ConfigError
from alignflow.tasks.params import StageOverrides, overrides
from alignflow.tasks.policy_pointer import PolicyPointer, advance, pointer_uri, read_pointer
from alignflow.tasks import curves
from alignflow.tasks import pipeline
from alignflow.tasks.pipeline import Output, Step
from alignflow.tasks.ray_cluster import ray_cluster
from alignflow.tasks.recipes import load_recipe
from alignflow.tasks.report import build_report, publish_report
from alignflow.tasks.stage import stage_runner
from alignflow.tasks.stage_spec import check_store, check_store_reachable


def start_pointer(store: str, run_name: str, initial_policy: str | None, restart: bool,
                  flow_name: str) -> PolicyPointer | None:
    """The pointer this run continues from (None: start from `initial_policy`). An initial_policy
    other than the one the run started from is refused, not ignored, unless `restart`; the same one
    (a schedule that always passes it) continues from the pointer."""
    pointer = read_pointer(store, run_name)
    where = pointer_uri(store, run_name)
    if pointer is None and not initial_policy:
        raise ConfigError(f"{flow_name} run {run_name!r} has no policy yet ({where} does not exist): give its first "
                          f"run --param initial_policy=<model dir or store URI> (e.g. an SFT stage's model); later "
                          f"runs continue from the latest committed round")
    if pointer is None or not initial_policy:
        return pointer
    started_from = pointer.history[0].get("policy_in") if pointer.history else None
    if restart:     # the pointer is replaced after this run's first committed round
        return None
    if initial_policy != started_from:
        raise ConfigError(f"initial_policy={initial_policy}: run {run_name!r} already has a policy at round "
                          f"{pointer.round} ({where}, started from {started_from}); drop initial_policy to continue "
                          f"from it, or pass --param restart=true to start over from the new one")
    return pointer


async def policy_rounds(*, flow_name: str, train_stage: str, run_name: str, store: str, ray_address: str | None,
                        initial_policy: str | None, rounds: int, recipe: str | None,
                        generate: StageOverrides | None, train: StageOverrides | None, retries: int,
                        restart: bool = False) -> PolicyPointer:
    """The recipe's `generate.yaml` and `<train_stage>.yaml` configure the two stages of a round."""
    logger = get_run_logger()
    started = time.monotonic()
    store = check_store_reachable(check_store(store))
    if rounds < 1:
        raise ConfigError(f"rounds={rounds}: must be >= 1")
    pointer = start_pointer(store, run_name, initial_policy, restart, flow_name)
    if restart:
        logger.info("restart=true: %s starts again from initial_policy %s", run_name, initial_policy)
    generate, train = overrides(generate), overrides(train)
    # every round is planned before a cluster starts: round k trains from round k-1's committed model
    recipe_ = load_recipe(recipe)
    first = (pointer.round if pointer else 0) + 1
    steps, policy = [], pointer.model_uri if pointer else initial_policy
    for k in range(first, first + rounds):
        # the round number seeds the sampling, so rounds see fresh samples even from one policy,
        # and (with rollout_batch_size in the generate config) picks this round's slice of prompts
        at = {"pretrain": policy} if isinstance(policy, Output) else {}
        given = {} if at else {"pretrain": policy}
        steps += [Step(f"generate (round {k})", "batch_inference", "generate",
                       {**generate, **given, "seed": generate.get("seed", 0) + k, "iter": k - 1}, at),
                  Step(f"{train_stage} (round {k})", train_stage, train_stage, {**train, **given},
                       {**at, "dataset": Output(f"generate (round {k})", "output.jsonl")})]
        policy = Output(f"{train_stage} (round {k})")
    planned = pipeline.plan(steps, recipe_, store, run_name)
    await pipeline.publish_configs(flow_name, run_name, recipe_, planned)
    summaries: dict[str, dict] = {}
    # a scheduled run starts from whatever the pointer holds: its log says which model that is
    logger.info("round %d starts from %s (%s)", first, pointer.model_uri if pointer else initial_policy,
                f"the policy committed by round {pointer.round}" if pointer else "initial_policy")
    with ray_cluster(ray_address) as cluster:
        async for name, result in pipeline.run(planned, stage_runner(retries), store, run_name, cluster):
            summaries[name] = result.summary()
            if name.startswith("generate"):
                data = result
                continue
            given = {**planned[name].step.overrides, **planned[name].inputs}    # the policy as the run named it
            pointer = advance(store, run_name, pointer, result.model_uri, {
                "policy_in": given["pretrain"], "data": given["dataset"], "data_rows": data.metrics.get("rows"),
                "sampled_reward": data.metrics.get("mean_reward"), f"{train_stage}_metrics": result.metrics})
            logger.info("%s committed: %s (%s rows of generated data, mean sampled reward %s)", name,
                        result.model_uri, data.metrics.get("rows"), data.metrics.get("mean_reward"))
            if pointer.round < first + rounds - 1:
                logger.info("round %d starts from %s (the policy committed by round %d)", pointer.round + 1,
                            pointer.model_uri, pointer.round)
    report = build_report(flow_name, run_name, summaries, time.monotonic() - started)
    await publish_report(report, {"rounds": curves.rounds_panels(pointer.history)})
    return pointer
