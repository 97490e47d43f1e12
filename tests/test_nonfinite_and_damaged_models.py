"""Nothing non-finite is committed and no damaged model folder is loaded (docs/reliability.md, "Integrity"), each on
a fresh run of the SFT CLI: a NaN loss stops the stage uncommitted (or is skipped within --max_nonfinite_skips); an
update that overflows the weights is never checkpointed; a damaged model folder is one line before any weights load.
Damaged checkpoints, resumes and two writers on one output: tests/test_integrity.py."""

from __future__ import annotations

import json
import shutil

import pytest

from alignment import storage
from tests.integrity_runs import all_finite, error_lines, flip, sft

pytestmark = pytest.mark.integration


def test_nan_loss_stops_uncommitted_or_is_skipped(tiny_base, tmp_path):
    out = tmp_path / "nan"
    stopped = sft(
        ["--pretrain", str(tiny_base), "--save_path", str(out), "--max_steps", "3"], env={"ALIGNFLOW_NAN_AT_STEP": "2"}
    )
    lines = error_lines(stopped)
    assert stopped.returncode == 2 and len(lines) == 1, stopped.stderr[-3000:]
    assert "the loss became nan at optimizer step 2 (non-finite); stopped without committing" in lines[0]
    assert not out.exists() and not list(tmp_path.glob(".nan.*"))  # nothing committed, no staging left
    skipped = sft(
        ["--pretrain", str(tiny_base), "--save_path", str(out), "--max_steps", "3", "--max_nonfinite_skips", "1"],
        env={"ALIGNFLOW_NAN_AT_STEP": "2"},
    )
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    assert "skipping this micro-batch (1 of --max_nonfinite_skips 1 used)" in skipped.stderr
    rows = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 3]  # step 2 had no micro-batch to log
    assert all_finite(out)


def test_damaged_model_folder_is_one_line(tiny_base, tmp_path):
    """A committed folder whose weights changed (manifest), a truncated file without a manifest (its
    own header), and a config.json whose vocab_size doesn't match the weights."""
    cases = {}
    committed = tmp_path / "committed"
    shutil.copytree(tiny_base, committed)
    if not (committed / storage.MANIFEST).exists():
        storage.commit_dir(committed, committed, metadata={})
    flip(committed / "model.safetensors")
    cases[committed] = "model.safetensors does not match its sha256"
    truncated = tmp_path / "truncated"
    shutil.copytree(tiny_base, truncated)
    (truncated / storage.MANIFEST).unlink(missing_ok=True)
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    cases[truncated] = "the file is truncated or damaged"
    vocab = tmp_path / "vocab"
    shutil.copytree(tiny_base, vocab)
    (vocab / storage.MANIFEST).unlink(missing_ok=True)
    config = json.loads((vocab / "config.json").read_text())
    config["vocab_size"] += 7
    (vocab / "config.json").write_text(json.dumps(config))
    cases[vocab] = f"says vocab_size {config['vocab_size']}"
    for folder, needle in cases.items():
        run = sft(["--pretrain", str(folder), "--save_path", str(tmp_path / "out"), "--max_steps", "1"])
        lines = error_lines(run)
        assert run.returncode == 2 and len(lines) == 1, run.stderr[-3000:]
        assert f"--pretrain {folder}: " in lines[0] and needle in lines[0], lines[0]
        assert "Loading weights" not in run.stderr


def test_an_overflowed_update_is_never_checkpointed(tiny_base, tmp_path):
    """--learning_rate 1e39 (after step 1's warmup at 0): step 2's loss and gradient norm are finite, its update
    overflows the weights to NaN/Inf. Step 2's checkpoint is refused before a file of it is written: one line,
    exit 2, step 1's checkpoint the newest, no model committed."""
    out, ckpt = tmp_path / "model", tmp_path / "ckpt"
    run = sft(["--pretrain", str(tiny_base), "--save_path", str(out), "--ckpt_path", str(ckpt), "--max_steps", "2",
               "--save_steps", "1", "--learning_rate", "1e39"])  # fmt: skip
    lines = error_lines(run)
    assert run.returncode == 2 and len(lines) == 1, run.stderr[-3000:]
    assert f"checkpoint {ckpt}/global_step2: the model's weight " in lines[0], lines[0]
    assert "holds NaN/Inf after optimizer step 2 (the update overflowed the weights); not committed" in lines[0]
    assert [p.name for p in ckpt.glob("global_step*")] == ["global_step1"] and not (out / storage.MANIFEST).exists()
