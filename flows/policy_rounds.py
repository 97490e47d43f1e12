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

from alignflow.tasks import curves, pipeline
from alignflow.tasks.evaluate import better, evaluate_step, publish_evaluation, read_evaluation
from alignflow.tasks.params import Gate, StageOverrides, overrides
from alignflow.tasks.pipeline import Output, Step
from alignflow.tasks.policy_pointer import PolicyPointer, advance, pointer_uri, read_pointer
from alignflow.tasks.ray_cluster import ray_cluster
from alignflow.tasks.recipes import load_recipe
from alignflow.tasks.report import build_report, publish_report
from alignflow.tasks.stage import stage_runner
from alignflow.tasks.stage_spec import check_store, check_store_reachable
from alignment.config import ConfigError


def start_pointer(
    store: str, run_name: str, initial_policy: str | None, restart: bool, flow_name: str
) -> PolicyPointer | None:
    """The pointer this run continues from (None: start from `initial_policy`). An initial_policy
    other than the one the run started from is refused, not ignored, unless `restart`; the same one
    (a schedule that always passes it) continues from the pointer."""
    pointer = read_pointer(store, run_name)
    where = pointer_uri(store, run_name)
    if pointer is None and not initial_policy:
        raise ConfigError(
            f"{flow_name} run {run_name!r} has no policy yet ({where} does not exist): give its first "
            f"run --param initial_policy=<model dir or store URI> (e.g. an SFT stage's model); later "
            f"runs continue from the latest committed round"
        )
    if pointer is None or not initial_policy:
        return pointer
    started_from = pointer.history[0].get("policy_in") if pointer.history else None
    if restart:  # the pointer is replaced after this run's first committed round
        return None
    if initial_policy != started_from:
        raise ConfigError(
            f"initial_policy={initial_policy}: run {run_name!r} already has a policy at round "
            f"{pointer.round} ({where}, started from {started_from}); drop initial_policy to continue "
            f"from it, or pass --param restart=true to start over from the new one"
        )
    return pointer


def round_steps(
    k: int, train_stage: str, policy: str, generate: dict, train: dict, evaluate: dict | None
) -> list[Step]:
    """Round k: generate with `policy`, train the next policy on that data; with a gate, evaluate both (the
    current policy's evaluation has the identity of its model and config, so it is run once, not per round)."""
    # the round number seeds the sampling, so rounds see fresh samples even from one policy,
    # and (with rollout_batch_size in the generate config) picks this round's slice of prompts
    steps = [
        Step(
            f"generate (round {k})",
            "batch_inference",
            "generate",
            {**generate, "pretrain": policy, "seed": generate.get("seed", 0) + k, "iter": k - 1},
        ),
        Step(
            f"{train_stage} (round {k})",
            train_stage,
            train_stage,
            {**train, "pretrain": policy},
            {"dataset": Output(f"generate (round {k})", "output.jsonl")},
        ),
    ]
    if evaluate is not None:  # gated
        steps += [
            evaluate_step(f"policy (round {k})", policy, evaluate),
            evaluate_step(f"{train_stage} (round {k})", Output(f"{train_stage} (round {k})"), evaluate),
        ]
    return steps


def origin(pointer: PolicyPointer | None) -> str:
    """Where the pointer's policy came from, for the log: the round that committed it, or initial_policy."""
    for h in reversed(pointer.history if pointer else []):
        if h["model_uri"] == pointer.model_uri and h.get("promoted", True):
            return (
                f"round {h['rollback_to']}'s model, rolled back to"
                if "rollback_to" in h
                else f"the policy committed by round {h['round']}"
            )
    return "initial_policy"


def gate_decision(gate: Gate, new: dict, old: dict) -> tuple[bool, str]:
    """(promote?, why) from the two evaluations' metrics."""
    if gate.metric not in new or gate.metric not in old:
        raise ConfigError(
            f"gate metric {gate.metric!r}: the recipe's evaluate stage commits "
            f"{', '.join(k for k in new if k != 'rows')}; set gate.metric to one of them"
        )
    ok = better(gate.metric, new[gate.metric], old[gate.metric], gate.margin)
    verdict = "promoted" if ok else "not promoted, the policy stays"
    return ok, (
        f"{verdict}: {gate.metric} {new[gate.metric]:.4g} against the current policy's "
        f"{old[gate.metric]:.4g} (margin {gate.margin:g})"
    )


async def policy_rounds(
    *,
    flow_name: str,
    train_stage: str,
    run_name: str,
    store: str,
    ray_address: str | None,
    initial_policy: str | None,
    rounds: int,
    recipe: str | None,
    generate: StageOverrides | None,
    train: StageOverrides | None,
    retries: int,
    restart: bool = False,
    gate: Gate | None = None,
    evaluate: StageOverrides | None = None,
) -> PolicyPointer:
    """The recipe's `generate.yaml` and `<train_stage>.yaml` configure the two stages of a round (and its
    `evaluate.yaml` the gate's evaluation)."""
    logger = get_run_logger()
    started = time.monotonic()
    store = check_store_reachable(check_store(store))
    if rounds < 1:
        raise ConfigError(f"rounds={rounds}: must be >= 1")
    pointer = start_pointer(store, run_name, initial_policy, restart, flow_name)
    if restart:
        logger.info("restart=true: %s starts again from initial_policy %s", run_name, initial_policy)
    generate, train = overrides(generate), overrides(train)
    gate = Gate.model_validate(gate) if isinstance(gate, dict) else gate
    if evaluate and gate is None:
        raise ConfigError(
            "evaluate overrides configure the promotion gate's evaluation: pass gate={...} too "
            "(e.g. gate={\"metric\": \"accuracy\"}), or drop evaluate"
        )
    evaluate = overrides(evaluate) if gate is not None else None
    recipe_ = load_recipe(recipe)
    first = (pointer.round if pointer else 0) + 1
    policy = pointer.model_uri if pointer else initial_policy
    # the first round is planned (every config merged and validated) before a cluster starts; a later
    # round's policy is known only when the round before it has been decided, so it is planned then
    planned = pipeline.plan(
        round_steps(first, train_stage, policy, generate, train, evaluate), recipe_, store, run_name
    )
    await pipeline.publish_configs(flow_name, run_name, recipe_, planned)
    summaries: dict[str, dict] = {}
    notes: list[str] = []
    # a scheduled run starts from whatever the pointer holds: its log says which model that is
    logger.info("round %d starts from %s (%s)", first, policy, origin(pointer))
    with ray_cluster(ray_address) as cluster:
        for k in range(first, first + rounds):
            if k > first:
                planned = pipeline.plan(
                    round_steps(k, train_stage, policy, generate, train, evaluate), recipe_, store, run_name
                )
            results = {}
            async for name, result in pipeline.run(planned, stage_runner(retries), store, run_name, cluster):
                results[name] = result
                summaries[name] = result.summary()
            data_uri = planned[f"{train_stage} (round {k})"].inputs["dataset"]
            pointer = await decide(
                k, train_stage, results, data_uri, gate, store, run_name, pointer, policy, summaries, notes
            )
            policy = pointer.model_uri
            if k < first + rounds - 1:
                logger.info("round %d starts from %s (%s)", k + 1, policy, origin(pointer))
    report = build_report(flow_name, run_name, summaries, time.monotonic() - started, notes)
    await publish_report(report, {"rounds": curves.rounds_panels(pointer.history)})
    return pointer


async def decide(
    k: int,
    train_stage: str,
    results: dict,
    data_uri: str,
    gate: Gate | None,
    store: str,
    run_name: str,
    pointer: PolicyPointer | None,
    policy: str,
    summaries: dict,
    notes: list[str],
) -> PolicyPointer:
    """Record round k in the pointer: promoted unless a gate says its model is not better; the report's note."""
    logger = get_run_logger()
    data, trained = results[f"generate (round {k})"], results[f"{train_stage} (round {k})"]
    record = {
        "policy_in": policy,
        "data": data_uri,
        "data_rows": data.metrics.get("rows"),
        "sampled_reward": data.metrics.get("mean_reward"),
        f"{train_stage}_metrics": trained.metrics,
    }
    promoted, why = True, "promoted (no gate)"
    if gate is not None:
        new = read_evaluation(results[f"evaluate {train_stage} (round {k})"].model_uri)
        old = read_evaluation(results[f"evaluate policy (round {k})"].model_uri)
        for label, result in ((f"{train_stage} (round {k})", new), (f"policy (round {k})", old)):
            await publish_evaluation(label, result, run_name)
        promoted, why = gate_decision(gate, new["metrics"], old["metrics"])
        record |= {
            "evaluation": new["metrics"],
            "policy_evaluation": old["metrics"],
            "gate": why,
            **({"heldout_accuracy": new["accuracy"]} if "accuracy" in new else {}),
        }
        summaries[f"{train_stage} (round {k})"]["heldout"] = new
    if pointer is None and not promoted:  # round 1 kept out: the policy stays the initial one
        pointer = PolicyPointer(0, policy, [])
    pointer = advance(store, run_name, pointer, trained.model_uri, record, promoted)
    notes.append(f"round {k}: {trained.model_uri} {why}")
    logger.info(
        "%s (round %d) committed: %s, %s; %s rows of generated data, mean sampled reward %s",
        train_stage,
        k,
        trained.model_uri,
        why,
        data.metrics.get("rows"),
        data.metrics.get("mean_reward"),
    )
    return pointer
