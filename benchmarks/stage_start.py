"""What a stage pays for running as a Ray job: a tiny-model SFT job on a warm local Ray head,
submitted -> SUCCEEDED, and its training speed, next to the same CLI run bare (no Ray running).

    .venv/bin/python benchmarks/stage_start.py --steps 2 --rounds 3      # the fixed cost per stage
    .venv/bin/python benchmarks/stage_start.py --steps 400 --rounds 2    # the speed of training inside a job

Prints one line per run: wall seconds and the steps/s of the last progress-bar update. Figures
are in docs/benchmarks.md ("Orchestration: the rank actors").
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from alignflow.tasks.cluster import ray_auth, ray_cluster  # noqa: E402
from alignflow.tasks.cluster.ray_job import runtime_env  # noqa: E402

ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "DS_ACCELERATOR": "cpu", "RAY_DEDUP_LOGS": "0"}


def sft_args(base: Path, out: Path, steps: int) -> list[str]:
    return [
        "--pretrain",
        str(base),
        "--save_path",
        str(out),
        "--dataset",
        "json@data/tiny/sft",
        "--input_key",
        "context_messages",
        "--apply_chat_template",
        "--multiturn",
        "--max_len",
        "64",
        "--packing_samples",
        "--train_batch_size",
        "32",
        "--micro_train_batch_size",
        "32",
        "--max_epochs",
        "20",
        "--max_steps",
        str(steps),
        "--learning_rate",
        "1e-3",
        "--logging_steps",
        "1",
    ]


def steps_per_s(log: str) -> float:
    rates = re.findall(r"sft:\s+\d+%\|[^|]*\|\s*\d+/\d+ \[[^\]]*?([0-9.]+)it/s", log)  # the training bar's
    return float(rates[-1]) if rates else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from ray.job_submission import JobStatus, JobSubmissionClient

    from alignment.tiny_world.base_model import make_base

    work = Path(tempfile.mkdtemp(prefix="alignflow-stage-start-"))
    base = make_base(work / "base", seed=0)
    for r in range(args.rounds):
        t0 = time.time()
        done = subprocess.run(
            [sys.executable, "-m", "alignment.cli.train_sft", *sft_args(base, work / f"bare{r}", args.steps)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        print(
            f"bare CLI   round {r}: {time.time() - t0:6.1f} s, {steps_per_s(done.stderr + done.stdout):5.2f} steps/s",
            flush=True,
        )
    with ray_cluster.local_head() as url, ray_auth.client_auth():
        client = JobSubmissionClient(url)
        for r in range(args.rounds):
            cmd = " ".join(
                [sys.executable, "-m", "alignment.cli.train_sft", *sft_args(base, work / f"job{r}", args.steps)]
            )
            t0 = time.time()
            sid = client.submit_job(entrypoint=f"cd {REPO} && {cmd}", runtime_env=runtime_env(ENV))
            while not (status := client.get_job_status(sid)).is_terminal():
                time.sleep(1.0)
            if status != JobStatus.SUCCEEDED:
                raise SystemExit(f"job {sid} {status}:\n{client.get_job_logs(sid)[-3000:]}")
            print(
                f"Ray job    round {r}: {time.time() - t0:6.1f} s, "
                f"{steps_per_s(client.get_job_logs(sid)):5.2f} steps/s",
                flush=True,
            )


if __name__ == "__main__":
    main()
