"""`ray job submit` of `python -m alignment.cli.train_ppo_ray` against the session's Ray head, as a user submits it:
the PPO-on-Ray tests' one way to run a job and read its status and log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from alignment.tiny_world.paths import tiny_dir
from tests.conftest import REPO, python_env

PROMPTS = [
    "--prompt_data",
    f"json@{tiny_dir() / 'prompts'}",
    "--input_key",
    "context_messages",
    "--apply_chat_template",
    "--logging_steps",
    "1",
]


def ray_job(address: str, args: list[str], submission_id: str, env_vars: dict | None = None) -> tuple[str, str]:
    """Submit `python -m alignment.cli.train_ppo_ray args` with the `ray` CLI; (status, logs)."""
    from ray.job_submission import JobSubmissionClient

    env = {"env_vars": {"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", **(env_vars or {})}}
    ray_cli = str(Path(sys.executable).parent / "ray")
    subprocess.run(
        [
            ray_cli,
            "job",
            "submit",
            "--address",
            address,
            "--submission-id",
            submission_id,
            "--runtime-env-json",
            json.dumps(env),
            "--",
            sys.executable,
            "-m",
            "alignment.cli.train_ppo_ray",
            *args,
        ],
        cwd=REPO,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    client = JobSubmissionClient(address)
    return str(client.get_job_status(submission_id)), client.get_job_logs(submission_id)
