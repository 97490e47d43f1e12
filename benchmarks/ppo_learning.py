"""Does the PPO family raise held-out accuracy on the tiny world? (~3.5 minutes per estimator on
one core; gae ~6.) From a committed SFT model and a trained RM (e.g. the ones
benchmarks/preference_stages.py writes; RM_DIR `none`: the rule reward, critic-free estimators
only), run `alignment.cli.train_ppo` with the tiny recipe's ppo.yaml and that estimator, and report
held-out greedy accuracy before/after, the sampled reward curve (mean per sixth of the run) and the final KL.

Usage: .venv/bin/python benchmarks/ppo_learning.py SFT_DIR RM_DIR OUT_DIR [estimator[@vllm|@async] ...]
`estimator@vllm` runs `alignment.cli.train_ppo_ray` on a local Ray cluster with one vLLM engine
(its own core; actor and reference colocated on the other), `estimator@async` the same with
--async_train (overlapped rollouts, samples one update old): the synchronous and overlapped runs
side by side. Set PPO_LAUNCHER=deepspeed to start each run as `deepspeed --num_gpus 1 --module alignment.cli.train_ppo`
(OpenRLHF's launch line) instead of `python -m`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")

RECIPE = REPO / "deployments" / "recipes" / "tiny" / "ppo.yaml"


def ppo_flags(estimator: str, reward_model: str | None) -> list[str]:
    """The tiny recipe's PPO stage with `estimator`: the reward from `reward_model` (normalised; gae's
    critic starts from it too) or, with none, the rule reward (critic-free estimators only)."""
    # the recipe places its groups for train_ppo_ray; train_ppo runs every model in its own ranks
    flags = [
        "--config",
        str(RECIPE),
        "--colocate_actor_ref",
        "false",
        "--advantage_estimator",
        estimator,
        "--save_steps",
        "-1",
    ]
    if reward_model:
        return [*flags, "--reward_pretrain", reward_model]
    if estimator == "gae":
        raise SystemExit("gae needs a trained reward model (its critic starts from it)")
    return [*flags, "--remote_rm_url", "alignment/tiny_world/reward.py", "--normalize_reward", "false"]


def curve(rows: list[dict], key: str, parts: int = 6) -> list[float]:
    k = max(1, len(rows) // parts)
    return [round(sum(r[key] for r in rows[i : i + k]) / len(rows[i : i + k]), 3) for i in range(0, k * parts, k)]


def main() -> None:
    from alignment.tiny_world.evaluate import greedy_accuracy, kl_to_reference

    sft, rm, out = (Path(a) for a in sys.argv[1:4])
    estimators = sys.argv[4:] or ["gae", "reinforce", "rloo", "group_norm"]
    out.mkdir(parents=True, exist_ok=True)
    report = {"sft_accuracy": greedy_accuracy(sft).accuracy, "runs": {}}
    for name in estimators:
        est, _, engine = name.partition("@")
        save = out / name.replace("@", "-")
        flags = ppo_flags(est, None if str(rm) == "none" else str(rm))
        module = "alignment.cli.train_ppo"
        if engine:  # train_ppo_ray: the recipe's colocated actor + reference, a vLLM engine on the other core
            module = "alignment.cli.train_ppo_ray"
            flags = [
                *flags,
                "--colocate_actor_ref",
                "true",
                "--vllm_num_engines",
                "1",
                "--vllm_sync_backend",
                "gloo",
                *(["--async_train"] if engine == "async" else []),
            ]
        t0 = time.time()
        launcher = (
            [str(Path(sys.executable).parent / "deepspeed"), "--num_gpus", "1", "--module"]
            if os.environ.get("PPO_LAUNCHER") == "deepspeed" and not engine
            else [sys.executable, "-m"]
        )
        proc = subprocess.run(
            [*launcher, module, "--pretrain", str(sft), "--save_path", str(save), "--num_threads", "1", *flags],
            cwd=REPO,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
        rows = [json.loads(line) for line in (save / "metrics.jsonl").read_text().splitlines()]
        report["runs"][name] = {
            "launcher": " ".join([Path(launcher[0]).name, *launcher[1:], module]),
            "accuracy_after": greedy_accuracy(save).accuracy,
            "minutes": round((time.time() - t0) / 60, 1),
            "iterations": len(rows),
            "reward_curve": curve(rows, "train/reward"),
            "kl_curve": curve(rows, "train/kl") if "train/kl" in rows[-1] else [None],
            "kl_to_sft_after": round(kl_to_reference(save, sft), 3),  # measured even without a KL term
            # wall clock between consecutive iterations' metric rows
            "seconds_per_iteration": round(statistics.median(b["time"] - a["time"] for a, b in zip(rows, rows[1:])), 3),
        }
        print(json.dumps({name: report["runs"][name]}), flush=True)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    print(f"SFT {report['sft_accuracy']:.1%}")
    for est, r in report["runs"].items():
        print(
            f"{est:16s} {r['accuracy_after']:.1%}  reward {r['reward_curve'][0]} -> {r['reward_curve'][-1]}  "
            f"KL {r['kl_curve'][-1]} (to SFT after: {r['kl_to_sft_after']})  "
            f"({r['iterations']} iterations, {r['minutes']} min)"
        )


if __name__ == "__main__":
    main()
