"""The demo: the whole sft-rm-ppo pipeline on the embedded default, on this machine's CPU.

A Prefect flow (ephemeral API, no server to start) runs each stage as a Ray job on a local
Ray head: a seeded random-init tiny Llama → SFT on the arithmetic task → reward model →
PPO-family with that reward model, checkpoints committed to a local store (runs/demo/store).
The flow logs the pipeline's report (the flow run's report artifact) once: per
stage the wall time, the committed model and its key metric, the reward curve of the RL stage,
and held-out greedy accuracy after SFT and after RL.
Run it again and every committed stage is skipped (delete runs/demo to start over).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from embedded_env import setup  # noqa: E402

REPO = setup("demo")  # before prefect is imported


def report(result: dict, total: float, out: Path) -> dict:
    """Write the figures of a finished sft-rm-ppo flow to `out` (the report's text is in the flow's log
    already, where the flow run publishes it as its artifact: printed once) and say where its curves are."""
    from alignflow.tasks.presentation.report import build_report

    rep = build_report("sft-rm-ppo", "demo", result, total)
    print(
        "curves: curves.png next to each stage's output above, metrics.jsonl and tensorboard/ inside each model, "
        f"and the flow run's artifacts in Prefect (PREFECT_HOME={os.environ.get('PREFECT_HOME')})"
    )
    r, k = rep.rl_rewards, max(1, len(rep.rl_rewards) // 4)
    summary = {
        "stages": result,
        "total_s": total,
        "phases_s": rep.phases,
        "rl_reward_first_quarter": sum(r[:k]) / k,
        "rl_reward_last_quarter": sum(r[-k:]) / k,
        "sft_accuracy": result["sft"].get("heldout", {}).get("accuracy"),
        "rl_accuracy": result["ppo"].get("heldout", {}).get("accuracy"),
    }
    out.write_text(json.dumps(summary, indent=1))
    return summary


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="The sft -> rm -> ppo demo on the tiny world (what `make demo` runs).")
    p.add_argument("--root", default=str(REPO / "runs" / "demo"), help="where its store and report go")
    for flag in ("--sft", "--rm", "--ppo"):  # shorter runs for tests and a first look; the stage's flags as JSON
        p.add_argument(flag, type=json.loads, default=None, help=f"{flag[2:]} overrides, e.g. '{{\"max_steps\": 20}}'")
    p.add_argument("--no_heldout_eval", action="store_true", help="skip the held-out accuracy of SFT and RL")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    from prefect.exceptions import TerminationSignal

    from alignflow.flows.sft_rm_ppo import sft_rm_ppo_flow
    from alignflow.tasks.orchestration.interrupted import sigterm_as_ctrl_c, summary_line

    args = parse(argv)
    root = Path(args.root)
    store = str(root / "store")
    got = sigterm_as_ctrl_c()  # `kill` ends it like Ctrl-C: one line, the Ray head and Prefect API stopped
    t0 = time.time()
    try:
        result = asyncio.run(
            sft_rm_ppo_flow(
                run_name="demo",
                store=store,
                recipe="tiny",
                sft=args.sft,
                rm=args.rm,
                ppo=args.ppo,
                heldout_eval=not args.no_heldout_eval,
            )
        )
    except (KeyboardInterrupt, TerminationSignal) as e:  # Prefect turns SIGTERM into TerminationSignal mid-flow
        got["signal"] = getattr(e, "signal", got["signal"])
        again = "make demo" if argv is None and len(sys.argv) == 1 else "this command"
        print(summary_line(store, "demo", again), file=sys.stderr)
        sys.exit(128 + int(got["signal"]))
    report(result, time.time() - t0, root / "report.json")


if __name__ == "__main__":
    main()
