"""Which model is "the latest policy" of an iterative run: `<store>/<run_name>/policy.json`.

{"round": k, "model_uri": ..., "history": [{"round": 1, "policy_in": ..., "data": ..., "model_uri": ...,
"promoted": true}, ...]}

`round` counts the rounds run; `model_uri` is the policy the next round starts from: the last round's model,
or, where a gate kept a round's model out (`promoted: false`), the better one before it. `rollback` points it
at an earlier round's model, recorded in the history too.

Written atomically (temp file + rename / a single PUT), and only after the round's model is
committed: a failed round leaves the pointer where it was, so the next scheduled run redoes that
round from the same policy. Torch-free (runs in the Prefect process).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from alignment import storage
from alignment.storage import StorageError


@dataclass
class PolicyPointer:
    round: int
    model_uri: str
    history: list[dict] = field(default_factory=list)


def pointer_uri(store: str, run_name: str) -> str:
    return f"{store.rstrip('/')}/{run_name}/policy.json"


def read_pointer(store: str, run_name: str) -> PolicyPointer | None:
    text = storage.read_text(pointer_uri(store, run_name))
    if text is None:
        return None
    try:
        return PolicyPointer(**json.loads(text))
    except (ValueError, TypeError) as e:
        raise StorageError(
            f"{pointer_uri(store, run_name)} is not a policy pointer ({e}); restore it from the "
            f"round history or delete it to start again from the initial policy"
        ) from None


def advance(
    store: str, run_name: str, current: PolicyPointer | None, model_uri: str, record: dict, promoted: bool = True
) -> PolicyPointer:
    """Record round k's `model_uri` (which must be committed); it becomes the next round's policy if
    `promoted`, else the pointer keeps the current policy."""
    if not storage.is_committed(model_uri):
        raise StorageError(f"refusing to point {pointer_uri(store, run_name)} at {model_uri}: it has no MANIFEST.json")
    if not promoted and current is None:
        raise ValueError("a round that is not promoted needs a current policy to keep")
    k = (current.round if current else 0) + 1
    policy = model_uri if promoted else current.model_uri
    new = PolicyPointer(
        k,
        policy,
        [*(current.history if current else []), {"round": k, **record, "model_uri": model_uri, "promoted": promoted}],
    )
    storage.write_text_atomic(pointer_uri(store, run_name), json.dumps(asdict(new), indent=1))
    return new


def rollback(store: str, run_name: str, to_round: int) -> PolicyPointer:
    """Point the run's policy at round `to_round`'s model (kept in the store, promoted or not); the next
    round starts from it. The rollback is recorded in the history; no round's output is touched."""
    current = read_pointer(store, run_name)
    where = pointer_uri(store, run_name)
    if current is None:
        raise StorageError(f"{where} does not exist: run {run_name!r} has no policy to roll back")
    rounds = {h["round"]: h for h in current.history if "rollback_to" not in h}
    if to_round not in rounds:
        raise StorageError(f"run {run_name!r} has no round {to_round} (rounds: {', '.join(map(str, sorted(rounds)))})")
    model_uri = rounds[to_round]["model_uri"]
    if not storage.is_committed(model_uri):
        raise StorageError(f"round {to_round}'s model {model_uri} is no longer committed; pick another round")
    new = PolicyPointer(
        current.round,
        model_uri,
        [
            *current.history,
            {"round": current.round, "rollback_to": to_round, "from": current.model_uri, "model_uri": model_uri},
        ],
    )
    storage.write_text_atomic(where, json.dumps(asdict(new), indent=1))
    return new
