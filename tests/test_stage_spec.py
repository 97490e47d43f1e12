"""The orchestrator's pure parts: stage identity, config building, store URIs; torch-free layers."""
import subprocess
import sys

import pytest

from alignment.config import ConfigError
from alignflow.tasks.stage_spec import build_config, check_store, identity_hash, job_config, stage_dir
from tests.conftest import REPO

TINY = str(REPO / "deployments" / "configs" / "tiny_sft.yaml")


def cfg(**over):
    return build_config("sft", TINY, {"pretrain": "/m", **over})


def test_identity_ignores_bookkeeping_but_not_hyperparameters():
    base = identity_hash("sft", cfg())
    assert identity_hash("sft", cfg(logging_steps=7, save_steps=11, wandb_run_name="x")) == base
    assert identity_hash("sft", cfg(learning_rate=1e-4)) != base
    assert identity_hash("sft", cfg(), inputs={"pretrain": "s3://b/x"}) != base


def test_relative_data_paths_become_absolute():
    c = cfg()
    assert c.dataset == f"json@{REPO / 'data' / 'tiny' / 'sft'}"


def test_job_config_points_outputs_into_the_stage_dir():
    out = stage_dir("s3://b/p", "run", "sft", "abc")
    j = job_config("sft", cfg(), out, "run")
    assert j.save_path == "s3://b/p/run/sft-abc/model" and j.ckpt_path == "s3://b/p/run/sft-abc/checkpoints"
    assert j.load_checkpoint
    # trackers follow the pipeline: events committed with the model, wandb grouped by run
    assert j.use_tensorboard == "s3://b/p/run/sft-abc/model/tensorboard"
    assert (j.wandb_group, j.wandb_run_name) == ("run", "run-sft")
    named = job_config("sft", cfg(wandb_group="g", wandb_run_name="mine"), out, "run")
    assert (named.wandb_group, named.wandb_run_name) == ("g", "mine")


def test_flows_refuse_a_tensorboard_dir_of_their_own():
    with pytest.raises(ConfigError, match="in a flow every stage writes its TensorBoard events into its output"):
        cfg(use_tensorboard="/tb")


def test_store_uris():
    assert check_store("runs/x").startswith("/")
    assert check_store("s3://bucket/p/") == "s3://bucket/p"
    with pytest.raises(ConfigError, match="unsupported scheme 'gs'"):
        check_store("gs://bucket")


def test_overrides_are_checked_like_flags():
    with pytest.raises(ConfigError, match="unknown option 'learning_rte'"):
        cfg(learning_rte=1)
    with pytest.raises(ConfigError, match="--zero_stage 5 is not one of"):
        cfg(zero_stage=5)


def test_prefect_layer_does_not_import_torch():
    code = "import sys, alignflow.flows.sft, alignflow.tasks.stage; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]
