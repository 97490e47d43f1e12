"""python -m alignflow.policy show|rollback: the policy pointer of a round-based run (iterative DPO,
rejection sampling) — which round's model the next round starts from, and every round's gate decision.

    python -m alignflow.policy show --store runs/store --run_name iterative-dpo
    python -m alignflow.policy rollback --store runs/store --run_name iterative-dpo --round 2

`rollback` points the run at an earlier round's model (every round's model stays committed in the store,
promoted or not); the next scheduled run continues from it. Exit 2 with one line on a bad store, run or round.
"""

from __future__ import annotations

import argparse
import sys

from alignflow.tasks.orchestration.policy_pointer import read_pointer, rollback
from alignflow.tasks.orchestration.stage_spec import check_store
from alignment.storage import StorageError


def history_lines(store: str, run_name: str) -> list[str]:
    pointer = read_pointer(store, run_name)
    if pointer is None:
        raise StorageError(f"run {run_name!r} has no policy pointer in {store}")
    lines = [f"run {run_name}: {pointer.round} round(s); the next round starts from {pointer.model_uri}"]
    for h in pointer.history:
        if "rollback_to" in h:
            lines.append(f"  rollback to round {h['rollback_to']}: {h['model_uri']}")
        else:
            verdict = h.get("gate") or ("promoted" if h.get("promoted", True) else "not promoted")
            lines.append(f"  round {h['round']}: {h['model_uri']} — {verdict}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m alignflow.policy", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("show", "rollback"))
    p.add_argument("--store", required=True, help="The flow's store (a local path, file:// or s3:// URI)")
    p.add_argument("--run_name", required=True, help="The round-based flow's run name")
    p.add_argument("--round", type=int, help="rollback: the round whose model becomes the policy")
    a = p.parse_args(argv)
    if a.command == "rollback" and a.round is None:
        p.error("rollback needs --round K (python -m alignflow.policy show lists the rounds)")
    try:
        store = check_store(a.store)
        if a.command == "rollback":
            new = rollback(store, a.run_name, a.round)
            print(f"run {a.run_name}: the next round starts from round {a.round}'s model {new.model_uri}")
        else:
            print("\n".join(history_lines(store, a.run_name)))
    except (StorageError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
