"""The integrity tests' runs of the SFT CLI (plain JSONL rows, ZeRO-2: optimizer states in a file of their own, one
process each) and what they damage and read back: a flipped byte, a folder's files, a model's weights all finite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from alignment.tiny_world.paths import tiny_dir
from tests.conftest import python_env

SFT = [
    "--dataset",
    f"{tiny_dir()}/sft/train.jsonl",
    "--input_key",
    "input",
    "--output_key",
    "output",
    "--max_len",
    "64",
    "--train_batch_size",
    "8",
    "--micro_train_batch_size",
    "8",
    "--learning_rate",
    "1e-3",
    "--seed",
    "3",
    "--zero_stage",
    "2",
]  # ZeRO-2: optimizer states in a file of their own


def sft(args: list[str], env: dict | None = None, wait: bool = True, cwd: Path | None = None):
    cmd = [sys.executable, "-m", "alignment.cli.train_sft", *SFT, *args]
    full = python_env(OMP_NUM_THREADS="2", **(env or {}))
    if not wait:
        return subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    return subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=600, cwd=cwd)


def error_lines(proc) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]


def flip(path: Path, at: int = -100) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def all_finite(model_dir: Path) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in load_file(model_dir / "model.safetensors").values())
