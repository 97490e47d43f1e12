"""The `iterative-dpo` flow: rounds of generate best-of-n with the current policy → score →
best/worst pairs (batch_inference with the iter_dpo post-processor) → DPO from the current
policy, which is also the reference → commit → advance the policy pointer.

    prefect deployment run 'iterative-dpo/nightly'

Each run continues from "the latest policy" recorded in the store (`tasks.policy_pointer`),
so scheduled runs pick up where the previous one stopped; the pointer moves only after a round's
model is committed, so a failed round is redone from the same policy next time. The first round
starts from `initial_policy` (a model directory or store URI, e.g. an SFT stage's output).
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from prefect import flow, get_run_logger

from alignment.config import ConfigError
from alignflow.tasks.policy_pointer import advance, pointer_uri, read_pointer
from alignflow.tasks.ray_cluster import ray_cluster
from alignflow.tasks.stage import run_stage
from alignflow.tasks.stage_spec import build_config, check_store, check_store_reachable, repo_path

CONFIGS = repo_path("deployments", "configs")


@flow(name="iterative-dpo")
async def iterative_dpo_flow(run_name: str = "tiny-idpo", store: str = "runs/store", ray_address: str | None = None,
                             initial_policy: str | None = None, rounds: int = 1,
                             generate_config_file: str | None = str(CONFIGS / "tiny_idpo_generate.yaml"),
                             generate: dict[str, Any] | None = None,
                             dpo_config_file: str | None = str(CONFIGS / "tiny_idpo_dpo.yaml"),
                             dpo: dict[str, Any] | None = None, retries: int = 2) -> dict[str, Any]:
    """Runs `rounds` rounds; returns the policy pointer (round, model URI, history)."""
    logger = get_run_logger()
    store = check_store_reachable(check_store(store))
    if rounds < 1:
        raise ConfigError(f"rounds={rounds}: must be >= 1")
    pointer = read_pointer(store, run_name)
    if pointer is None and not initial_policy:
        raise ConfigError(f"no policy yet at {pointer_uri(store, run_name)}: pass initial_policy=<model dir or store "
                          f"URI> (e.g. an SFT stage's model) for the first round")
    generate, dpo = dict(generate or {}), dict(dpo or {})
    build_config("batch_inference", generate_config_file, {**generate, "pretrain": "<policy>"})
    build_config("dpo", dpo_config_file, {**dpo, "pretrain": "<policy>", "dataset": "<pairs>"})
    with ray_cluster(ray_address) as address:
        run = run_stage.with_options(retries=retries)
        for _ in range(rounds):
            policy = pointer.model_uri if pointer else initial_policy
            k = (pointer.round if pointer else 0) + 1
            logger.info("iterative DPO round %d from %s", k, policy)
            # the round number seeds the sampling, so rounds see fresh samples even from one policy
            pairs = await run("batch_inference", store, run_name, address, generate_config_file,
                              {**generate, "seed": generate.get("seed", 0) + k}, {"pretrain": policy})
            pairs_uri = f"{pairs.model_uri}/output.jsonl"
            trained = await run("dpo", store, run_name, address, dpo_config_file, dpo,
                                {"pretrain": policy, "dataset": pairs_uri})
            pointer = advance(store, run_name, pointer, trained.model_uri, {
                "policy_in": policy, "pairs": pairs_uri, "pairs_rows": pairs.metrics.get("rows"),
                "sampled_reward": pairs.metrics.get("mean_reward"), "dpo_metrics": trained.metrics})
            logger.info("round %d committed: %s (pairs %s, mean sampled reward %s)", k, trained.model_uri,
                        pairs.metrics.get("rows"), pairs.metrics.get("mean_reward"))
    return asdict(pointer)
