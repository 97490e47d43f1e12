"""A checkpoint records whose it is (alignment/training/run_identity.py) and a resume from another run's is one
line before any of its weights load: another stage, another config (the run's length, placement and memory
knobs aside), another model shape. Fake checkpoints, no training: the real runs resume in test_integrity.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from alignment import storage
from alignment.config import ConfigError, DPOConfig, SFTConfig
from alignment.config.cli import parse_args
from alignment.training import checkpoint, finite, resume_point, run_identity
from alignment.training.run_identity import RunIdentity

SFT = ["--pretrain", "m", "--dataset", "d", "--save_path", "out", "--ckpt_path", "ck", "--save_steps", "2"]


def fake_checkpoint(ckpt: Path, record: dict | None, step: int = 2) -> str:
    """A committed checkpoint as save() leaves it, without weights: state.json, the manifest's metadata."""
    folder = ckpt / f"global_step{step}"
    folder.mkdir(parents=True)
    (folder / "state.json").write_text(json.dumps({"loop": {}, "rng": {}}))
    meta = {"global_step": step, "world_size": 1, finite.FINITE: True, **({run_identity.KEY: record} if record else {})}
    storage.commit_dir(folder, folder, metadata=meta)
    resume_point._verified.clear()
    return str(folder)


def test_a_resume_from_another_runs_checkpoint_is_one_line(tmp_path):
    ckpt = tmp_path / "ck"
    seed3 = parse_args(SFTConfig, [*SFT, "--seed", "3"])
    uri = fake_checkpoint(ckpt, RunIdentity.of(seed3).record())
    resume_point.check_world_size(str(ckpt), 1, RunIdentity.of(seed3))  # the same run resumes
    longer = parse_args(SFTConfig, [*SFT, "--seed", "3", "--max_steps", "40", "--micro_train_batch_size", "1"])
    resume_point.check_world_size(str(ckpt), 1, RunIdentity.of(longer))  # extended, other micro-batches: the same run
    for cfg, why in [
        (parse_args(SFTConfig, [*SFT, "--seed", "4"]), "config differs: --seed 3 there vs 4 here"),
        (parse_args(SFTConfig, [*SFT, "--seed", "3", "--learning_rate", "1e-3"]), "config differs: --learning_rate"),
        (parse_args(DPOConfig, [*SFT, "--seed", "3"]), "stage SFTConfig there, DPOConfig here"),
    ]:
        with pytest.raises(ConfigError) as e:
            resume_point.check_world_size(str(ckpt), 1, RunIdentity.of(cfg))
        assert str(e.value).startswith(f"checkpoint {uri} belongs to another run ({why}"), str(e.value)
        assert "give this run another --ckpt_path, or drop --load_checkpoint to start over" in str(e.value)


def test_a_checkpoint_of_another_model_shape_is_refused_before_its_weights_load(tmp_path):
    cfg = parse_args(SFTConfig, SFT)
    narrow, wide = torch.nn.Linear(4, 8), torch.nn.Linear(4, 16)
    record = RunIdentity.of(cfg).record({"model": narrow})
    uri = fake_checkpoint(tmp_path / "ck", record)
    RunIdentity.of(cfg).check_shapes(record, {"model": torch.nn.Linear(4, 8)}, uri)  # same shapes
    with pytest.raises(ConfigError, match="belongs to another run \\(model shape differs"):
        checkpoint.load_latest({"model": wide}, str(tmp_path / "ck"), RunIdentity.of(cfg))


def test_a_checkpoint_of_an_older_version_records_nothing_and_resumes(tmp_path):
    fake_checkpoint(tmp_path / "ck", None)
    resume_point.check_world_size(str(tmp_path / "ck"), 1, RunIdentity.of(parse_args(SFTConfig, SFT)))
