"""Which model is "the latest policy" of an iterative run: `<store>/<run_name>/policy.json`.

{"round": k, "model_uri": ..., "history": [{"round": 1, "policy_in": ..., "data": ..., "model_uri": ...}, ...]}

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
        raise StorageError(f"{pointer_uri(store, run_name)} is not a policy pointer ({e}); restore it from the "
                           f"round history or delete it to start again from the initial policy") from None


def advance(store: str, run_name: str, current: PolicyPointer | None, model_uri: str, record: dict) -> PolicyPointer:
    """Point at `model_uri` (which must be committed) as the next round's policy."""
    if not storage.is_committed(model_uri):
        raise StorageError(f"refusing to point {pointer_uri(store, run_name)} at {model_uri}: it has no MANIFEST.json")
    k = (current.round if current else 0) + 1
    new = PolicyPointer(k, model_uri, [*(current.history if current else []), {"round": k, **record,
                                                                                "model_uri": model_uri}])
    storage.write_text_atomic(pointer_uri(store, run_name), json.dumps(asdict(new), indent=1))
    return new
