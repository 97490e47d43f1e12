"""The SFT CLI on the tiny world as the SFT tests run it: the data flags, a small batch, `run_cli`."""

from __future__ import annotations

import subprocess

from alignment.tiny_world.paths import tiny_dir
from tests.conftest import run_module

TINY_DATA = [
    "--dataset",
    f"json@{tiny_dir() / 'sft'}",
    "--input_key",
    "context_messages",
    "--apply_chat_template",
    "--multiturn",
    "--max_len",
    "64",
    "--learning_rate",
    "2e-3",
    "--seed",
    "7",
]
TINY_SFT = [*TINY_DATA, "--train_batch_size", "16", "--micro_train_batch_size", "8", "--logging_steps", "1"]


def run_cli(
    args: list[str], launcher: list[str] | None = None, env: dict | None = None, check: bool = True, threads: int = 2
) -> subprocess.CompletedProcess:
    return run_module("alignment.cli.train_sft", args, launcher, env, check, threads)
