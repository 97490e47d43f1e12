"""SFT through the real CLI: DeepSpeed in 1 and 2 processes, resume equivalence, bad input."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from alignment.tiny_world.paths import tiny_dir
from tests.conftest import REPO, python_env

pytestmark = pytest.mark.integration

TINY_DATA = ["--dataset", f"json@{tiny_dir() / 'sft'}", "--input_key", "context_messages", "--apply_chat_template",
             "--multiturn", "--max_len", "64", "--learning_rate", "2e-3", "--seed", "7"]
TINY_SFT = [*TINY_DATA, "--train_batch_size", "16", "--micro_train_batch_size", "8", "--logging_steps", "1"]


def run_cli(args: list[str], launcher: list[str] | None = None, env: dict | None = None, check: bool = True,
            threads: int = 2) -> subprocess.CompletedProcess:
    cmd = (launcher or [sys.executable, "-m"]) + ["alignment.cli.train_sft", *args]
    proc = subprocess.run(cmd, cwd=REPO, env=python_env(OMP_NUM_THREADS=threads, **(env or {})),
                          capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def losses(save_path: Path) -> list[float]:
    rows = [json.loads(line) for line in (save_path / "metrics.jsonl").read_text().splitlines()]
    return [r["train/loss"] for r in rows if "train/loss" in r]


def test_sft_learns_the_task(tiny_base, tmp_path):
    """A short fixed run from random init: held-out greedy accuracy far above chance (~0 %)."""
    from alignment.tiny_world.evaluate import greedy_accuracy
    out = tmp_path / "sft"
    run_cli(["--pretrain", str(tiny_base), "--save_path", str(out), "--max_steps", "300", "--packing_samples",
             "--train_batch_size", "32", "--micro_train_batch_size", "32", "--logging_steps", "20", *TINY_DATA])
    acc = greedy_accuracy(out, limit=200).accuracy
    curve = losses(out)
    assert curve[-1] < 0.5 * curve[0]
    assert acc >= 0.05, acc
    # the final model loads with plain from_pretrained and has a committed manifest
    assert (out / "MANIFEST.json").exists() and (out / "model.safetensors").exists()


@pytest.mark.parametrize("zero_stage, launcher", [
    (2, ["deepspeed", "--num_gpus", "2", "--module"]),
    (3, ["torchrun", "--nproc_per_node", "2", "-m"]),
])
def test_two_process_zero_trains(tiny_base, tmp_path, zero_stage, launcher):
    bindir = Path(sys.executable).parent
    launcher = [str(bindir / launcher[0]), *launcher[1:]]
    out = tmp_path / f"z{zero_stage}"
    run_cli(["--pretrain", str(tiny_base), "--save_path", str(out), "--zero_stage", str(zero_stage),
             "--max_steps", "25", "--num_threads", "1", *TINY_SFT], launcher=launcher, threads=1)
    curve = losses(out)
    assert len(curve) == 25 and sum(curve[-5:]) / 5 < 0.8 * sum(curve[:5]) / 5, curve
    state = load_file(out / "model.safetensors")
    assert all(v.numel() > 0 for v in state.values())  # ZeRO-3 weights were gathered, not left as shards


def test_resume_equals_uninterrupted(tiny_base, tmp_path):
    common = ["--pretrain", str(tiny_base), "--max_steps", "12", "--save_steps", "4", "--zero_stage", "2", *TINY_SFT]
    full = tmp_path / "full"
    run_cli([*common, "--save_path", str(full), "--ckpt_path", str(tmp_path / "full_ckpt")])
    part = tmp_path / "part"
    ckpt = tmp_path / "part_ckpt"
    crashed = run_cli([*common, "--save_path", str(part), "--ckpt_path", str(ckpt)],
                      env={"ALIGNFLOW_FAIL_AT_STEP": "6"}, check=False)
    assert crashed.returncode != 0 and "simulated failure after step 6" in crashed.stderr
    assert (ckpt / "latest").read_text().strip() == "global_step4"
    assert not (part / "MANIFEST.json").exists()  # no committed final model from the crashed run
    run_cli([*common, "--save_path", str(part), "--ckpt_path", str(ckpt), "--load_checkpoint"])
    a, b = load_file(full / "model.safetensors"), load_file(part / "model.safetensors")
    assert a.keys() == b.keys()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst < 1e-5, worst
    assert losses(full) == pytest.approx(losses(part), abs=1e-5)


@pytest.mark.parametrize("args, needle", [
    (["--pretrain", "/nonexistent/model"], "--pretrain /nonexistent/model: directory does not exist"),
    (["--pretrain", "meta-llama/Llama-3-8B"], "could not be fetched from the Hugging Face hub (the hub is offline"),
    (["--train_batch_size", "10", "--micro_train_batch_size", "4"], "--train_batch_size 10 is not divisible"),
    (["--dataset", "/nonexistent/data.jsonl"], "dataset file /nonexistent/data.jsonl does not exist"),
])
def test_bad_input_one_clear_line(tiny_base, tmp_path, args, needle):
    base = ["--pretrain", str(tiny_base), "--dataset", f"json@{tiny_dir() / 'sft'}", "--input_key", "input",
            "--output_key", "output", "--save_path", str(tmp_path / "x")]
    proc = run_cli(base + args, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and needle in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
