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

from alignment import storage
from alignment.config import ConfigError
from alignflow.tasks.params import StageOverrides, overrides
from alignflow.tasks.policy_pointer import PolicyPointer, advance, pointer_uri, read_pointer
from alignflow.tasks import curves
from alignflow.tasks.ray_cluster import ray_cluster
from alignflow.tasks.recipes import StagePlan, load_recipe
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
    # both configs are validated before a cluster starts (the policy and data as placeholders)
    plan = StagePlan(load_recipe(recipe))
    plan.check("generate", "batch_inference", {**generate, "pretrain": "<policy>"})
    plan.check(train_stage, train_stage, {**train, "pretrain": "<policy>", "dataset": "<generated data>"})
    await plan.publish(flow_name, run_name)
    generate_config_file, train_config_file = plan.recipe.file("generate"), plan.recipe.file(train_stage)
    summaries: dict[str, dict] = {}
    with ray_cluster(ray_address) as cluster:
        run = stage_runner(retries)
        for _ in range(rounds):
            policy = pointer.model_uri if pointer else initial_policy
            k = (pointer.round if pointer else 0) + 1
            logger.info("%s round %d from %s", train_stage, k, policy)
            # the round number seeds the sampling, so rounds see fresh samples even from one policy,
            # and (with rollout_batch_size in the generate config) picks this round's slice of prompts
            data = await run("batch_inference", store, run_name, cluster, generate_config_file,
                             {**generate, "seed": generate.get("seed", 0) + k, "iter": k - 1}, {"pretrain": policy})
            data_uri = storage.file_in(data.model_uri, "output.jsonl")
            trained = await run(train_stage, store, run_name, cluster, train_config_file, train,
                                {"pretrain": policy, "dataset": data_uri})
            pointer = advance(store, run_name, pointer, trained.model_uri, {
                "policy_in": policy, "data": data_uri, "data_rows": data.metrics.get("rows"),
                "sampled_reward": data.metrics.get("mean_reward"), f"{train_stage}_metrics": trained.metrics})
            summaries[f"generate (round {k})"] = data.summary()
            summaries[f"{train_stage} (round {k})"] = trained.summary()
            logger.info("round %d committed: %s (%s rows of generated data, mean sampled reward %s)", k,
                        trained.model_uri, data.metrics.get("rows"), data.metrics.get("mean_reward"))
    report = build_report(flow_name, run_name, summaries, time.monotonic() - started)
    await publish_report(report, {"rounds": curves.rounds_panels(pointer.history)})
    return pointer
