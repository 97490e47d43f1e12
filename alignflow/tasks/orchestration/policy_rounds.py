"""The loop shared by the round-based flows (iterative DPO, rejection sampling): each round
generates data with the current policy (a batch_inference stage), trains the next policy on it
(a DPO or SFT stage whose `dataset` is that data and whose `pretrain` is the current policy),
then advances the policy pointer in the store.

"The current policy" is the pointer's model when the run has one, so scheduled runs continue
from the previous run's last committed round; the pointer moves only after a round's model is
committed, so a failed round is redone from the same policy next time.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefect import get_run_logger

from alignflow.tasks.orchestration.evaluate import better, evaluate_step, publish_evaluation, read_evaluation
from alignflow.tasks.orchestration.flow_run import Ending, FlowRun, Pipeline, Results, run_pipeline
from alignflow.tasks.orchestration.params import Gate, StageOverrides, overrides
from alignflow.tasks.orchestration.pipeline import Output, Step, flow_sets
from alignflow.tasks.orchestration.policy_pointer import PolicyPointer, advance, pointer_uri, read_pointer
from alignflow.tasks.orchestration.stage_spec import check_store, check_store_reachable
from alignflow.tasks.presentation import curves
from alignment import storage
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
            {**flow_sets("generate", generate, pretrain=policy, iter=k - 1), "seed": generate.get("seed", 0) + k},
        ),
        Step(
            f"{train_stage} (round {k})",
            train_stage,
            train_stage,
            flow_sets(train_stage, train, pretrain=policy),
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


def gate_and_evaluate(gate: Gate | dict | None, evaluate: StageOverrides | None) -> tuple[Gate | None, dict | None]:
    """The promotion gate (validated when given as a dict) and its evaluation's overrides (None: ungated)."""
    gate = Gate.model_validate(gate) if isinstance(gate, dict) else gate
    if evaluate and gate is None:
        raise ConfigError(
            "evaluate overrides configure the promotion gate's evaluation: pass gate={...} too "
            "(e.g. gate={\"metric\": \"accuracy\"}), or drop evaluate"
        )
    return gate, overrides(evaluate) if gate is not None else None


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
    store = check_store_reachable(check_store(store))
    if rounds < 1:
        raise ConfigError(f"rounds={rounds}: must be >= 1")
    pointer = start_pointer(store, run_name, initial_policy, restart, flow_name)
    if restart:
        logger.info("restart=true: %s starts again from initial_policy %s", run_name, initial_policy)
    generate, train = overrides(generate), overrides(train)
    gate, evaluate = gate_and_evaluate(gate, evaluate)
    first = (pointer.round if pointer else 0) + 1
    state = Rounds(first, first + rounds - 1, pointer, pointer.model_uri if pointer else initial_policy)
    notes: list[str] = []
    read: dict[str, dict] = {}

    def steps(k: int) -> list[Step]:
        return round_steps(k, train_stage, state.policy, generate, train, evaluate)

    async def then(results: Results) -> list[Step]:
        """Round k ran: decide it, advance the pointer; the next round's steps (its policy is known now)."""
        k = state.k
        state.pointer = await decide(k, train_stage, results, gate, store, run_name, state, notes, read)
        state.policy = state.pointer.model_uri
        if k == state.last:
            return []
        state.k = k + 1
        logger.info("round %d starts from %s (%s)", k + 1, state.policy, origin(state.pointer))
        return steps(k + 1)

    async def finish(results: Results) -> Ending:
        return Ending(notes, {"rounds": curves.rounds_panels(state.pointer.history)}, read)

    # a scheduled run starts from whatever the pointer holds: its log says which model that is
    logger.info("round %d starts from %s (%s)", first, state.policy, origin(pointer))
    run = FlowRun(flow_name, run_name, store, recipe, ray_address, retries)
    await run_pipeline(run, Pipeline(lambda _: steps(first), then=then, finish=finish))
    return state.pointer


@dataclass
class Rounds:
    """Where a run of rounds is: the round running, the last one to run, the pointer and the current policy."""

    k: int
    last: int
    pointer: PolicyPointer | None
    policy: str


async def decide(
    k: int,
    train_stage: str,
    results: Results,
    gate: Gate | None,
    store: str,
    run_name: str,
    state: Rounds,
    notes: list[str],
    read: dict[str, dict],
) -> PolicyPointer:
    """Record round k in the pointer: promoted unless a gate says its model is not better; the report's note
    (and the gate's evaluations in `read`)."""
    logger = get_run_logger()
    data, trained = results[f"generate (round {k})"], results[f"{train_stage} (round {k})"]
    record = {
        "policy_in": state.policy,
        "data": storage.file_in(data.model_uri, "output.jsonl"),
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
        read[f"{train_stage} (round {k})"] = new
    pointer = state.pointer
    if pointer is None and not promoted:  # round 1 kept out: the policy stays the initial one
        pointer = PolicyPointer(0, state.policy, [])
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
