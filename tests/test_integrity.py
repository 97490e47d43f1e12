"""Nothing damaged is used (docs/reliability.md, "Integrity"): a checkpoint whose files no longer match its
MANIFEST (or an older one holding non-finite weights) is skipped for the one before it, or refused in one line when
none is good; a resume from another run's checkpoints is refused; two runs on one output: the second is refused
naming the first, which commits; a run stopped while another host took its lease over writes nothing; checkpoints
at the default paths, inside the output, resume and commit. NaN losses, overflowed updates and damaged model
folders: tests/test_nonfinite_and_damaged_models.py."""

from __future__ import annotations

import json
import math
import shutil
import signal
import time

import pytest
import torch

from alignment import storage
from tests.conftest import losses
from tests.integrity_runs import SFT, all_finite, error_lines, flip, sft, tree

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def trained(tiny_base, module_tmp):
    """A 4-step run with checkpoints at steps 2 and 4 and its committed model. While it trains, a second
    run on the same --save_path is refused naming it (the lease)."""
    work = module_tmp
    out, ckpt = work / "model", work / "ckpt"
    first = sft(
        [
            "--pretrain",
            str(tiny_base),
            "--save_path",
            str(out),
            "--ckpt_path",
            str(ckpt),
            "--max_steps",
            "4",
            "--save_steps",
            "2",
            "--save_hf_ckpt",
        ],
        env={"ALIGNFLOW_HANG_AT_STEP": "3"},
        wait=False,
    )
    try:
        deadline = time.monotonic() + 180
        while not (ckpt / "global_step2" / storage.MANIFEST).exists():  # training, lease held, hanging at step 3
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-3000:]
            time.sleep(1)
        second = sft(
            [
                "--pretrain",
                str(tiny_base),
                "--save_path",
                str(out),
                "--ckpt_path",
                str(work / "other"),
                "--max_steps",
                "2",
            ]
        )
    finally:
        first.kill()
        first.wait()
    # the first run hung on purpose; rerun it to the end from its checkpoint (the lease of a dead holder is taken over)
    done = sft(
        [
            "--pretrain",
            str(tiny_base),
            "--save_path",
            str(out),
            "--ckpt_path",
            str(ckpt),
            "--max_steps",
            "4",
            "--save_steps",
            "2",
            "--load_checkpoint",
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "took over the lease" in done.stderr
    return work, out, ckpt, second


def test_save_hf_ckpt_puts_a_loadable_model_in_each_checkpoint(trained):
    """--save_hf_ckpt: <ckpt>/global_step<N>/model/hf/ loads with plain from_pretrained, and is in the manifest."""
    from transformers import AutoModelForCausalLM

    _, _, ckpt, _ = trained
    step2 = ckpt / "global_step2"
    assert "model/hf/model.safetensors" in json.loads((step2 / storage.MANIFEST).read_text())["files"]
    assert AutoModelForCausalLM.from_pretrained(step2 / "model" / "hf").config.model_type == "llama"


def test_a_stopped_run_taken_over_writes_nothing_and_a_shared_ckpt_path_is_refused(tiny_base, tmp_path):
    """A run stopped (SIGSTOP: Ctrl-Z, a Slurm suspend) and taken over from another host while stopped
    resumes, trains and reaches its first checkpoint, which the fence refuses before a file of it is
    written: exit 75, one line, no checkpoint and no model committed. A second run on the taker's
    --ckpt_path (another --save_path) is refused naming it before any weights load."""
    out, ckpt = tmp_path / "model", tmp_path / "ckpt"
    args = ["--pretrain", str(tiny_base), "--save_path", str(out), "--ckpt_path", str(ckpt), "--max_steps", "4"]
    run = sft([*args, "--save_steps", "2"], wait=False)
    leases = [tmp_path / ".model.lease", tmp_path / ".ckpt.lease"]
    deadline = time.monotonic() + 120
    while not all(p.exists() for p in leases):  # taken right after the flags, before the model loads
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()[1][-3000:]
        time.sleep(0.02)
    run.send_signal(signal.SIGSTOP)
    taker = {**json.loads(leases[0].read_text()), "owner": "taker", "host": "another-host", "heartbeat": time.time()}
    for p in leases:  # what a run on another host writes when it takes over a lease whose heartbeat went stale
        p.write_text(json.dumps(taker))
    run.send_signal(signal.SIGCONT)
    _, stderr = run.communicate(timeout=600)
    lines = [ln for ln in stderr.splitlines() if ln.startswith("error: ")]
    assert run.returncode == 75 and len(lines) == 1, stderr[-3000:]
    assert f"{ckpt}: this run's lease was taken over by " in lines[0] and "nothing was written" in lines[0]
    assert not (out / storage.MANIFEST).exists() and not list(ckpt.glob("global_step*"))  # not a file written
    assert all(json.loads(p.read_text())["owner"] == "taker" for p in leases)  # left to its holder
    other = sft(["--pretrain", str(tiny_base), "--save_path", str(tmp_path / "other"), "--ckpt_path", str(ckpt),
                 "--max_steps", "2", "--save_steps", "1"])  # fmt: skip
    lines = error_lines(other)
    assert other.returncode == 75 and len(lines) == 1, other.stderr[-3000:]
    assert f"{ckpt} is being written by " in lines[0] and "on another-host" in lines[0], lines[0]
    assert "Loading weights" not in other.stderr and not (tmp_path / "other").exists()


def test_second_writer_is_refused_naming_the_first(trained):
    work, out, _, second = trained
    lines = error_lines(second)
    assert second.returncode == 75 and len(lines) == 1, second.stderr[-3000:]
    assert f"{out} is being written by alignment.cli.train_sft (pid" in lines[0], lines[0]
    assert "Loading weights" not in second.stderr and not (work / "other").exists()
    assert (out / storage.MANIFEST).exists() and not (work / ".model.lease").exists()  # released at the end


@pytest.mark.parametrize("kind", ["optimizer", "model_states", "state_json", "manifest", "half_written"])
def test_damaged_checkpoint_is_skipped(trained, tmp_path, kind, caplog):
    """A damaged newer checkpoint is skipped with a warning; a half-written one (a save killed before its
    MANIFEST, even with `latest` pointing at it) is not a checkpoint at all: the resume takes the one before.
    A kill mid-save, end to end through the flows: tests/test_chaos_kills.py."""
    from alignment.training import resume_point

    _, _, ckpt, _ = trained
    copy = tmp_path / "ckpt"
    shutil.copytree(ckpt, copy)
    step4 = copy / "global_step4"
    target = {
        "optimizer": next(step4.rglob("*optim_states.pt")),
        "model_states": next(step4.rglob("*model_states.pt")),
        "state_json": step4 / "state.json",
        "manifest": step4 / storage.MANIFEST,
        "half_written": step4 / storage.MANIFEST,
    }[kind]
    if kind == "half_written":
        (step4 / storage.MANIFEST).unlink()
        (copy / "latest").write_text("global_step4")
    elif kind == "manifest":
        target.write_bytes(b'{"files": {"\xff\xfe": 1}}')  # not UTF-8
    else:
        flip(target, at=len(target.read_bytes()) // 2)
    found = resume_point.find_latest(str(copy))
    assert found is not None and found.name == "global_step2"
    assert (f"checkpoint {step4} is damaged" in caplog.text) == (kind != "half_written")
    flip(next((copy / "global_step2").rglob("*optim_states.pt")), at=200)
    resume_point._verified.clear()  # a process verifies a checkpoint once; this one changed since
    with pytest.raises(storage.StorageError, match="every committed checkpoint under .* is damaged"):
        resume_point.find_latest(str(copy))


def test_resume_falls_back_then_refuses(trained, tmp_path):
    _, out, ckpt, _ = trained
    copy, model = tmp_path / "ckpt", tmp_path / "model"
    shutil.copytree(ckpt, copy)
    flip(next((copy / "global_step4").rglob("*optim_states.pt")))
    run = sft(
        [
            "--pretrain",
            str(out),
            "--save_path",
            str(model),
            "--ckpt_path",
            str(copy),
            "--max_steps",
            "4",
            "--save_steps",
            "2",
            "--load_checkpoint",
        ]
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"resuming from the older checkpoint {copy}/global_step2" in run.stderr
    assert "resumed from" in run.stderr and "(step 2," in run.stderr
    assert all(math.isfinite(x) for x in losses(model)) and all_finite(model)
    # every checkpoint damaged: one line, before any weights load; the committed model stays as it was
    for step in ("global_step2", "global_step4"):
        flip(next((copy / step).rglob("*model_states.pt")), at=300)
    before = tree(model)
    refused = sft(
        [
            "--pretrain",
            str(out),
            "--save_path",
            str(model),
            "--ckpt_path",
            str(copy),
            "--max_steps",
            "6",
            "--save_steps",
            "2",
            "--load_checkpoint",
        ]
    )
    lines = error_lines(refused)
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr[-3000:]
    assert f"every committed checkpoint under {copy} is damaged" in lines[0]
    assert "Loading weights" not in refused.stderr and "Traceback" not in refused.stderr
    assert tree(model) == before


def test_a_non_finite_checkpoint_of_an_older_version_is_skipped(trained, tmp_path, caplog):
    """A checkpoint committed without the `finite` mark (before the weights were checked) has its saved weights
    read back at resume: one holding an Inf is skipped like a damaged one, and the one before it is used."""
    from alignment.training import finite, resume_point
    from alignment.training.weights_only import WeightsOnlyCheckpointEngine

    _, _, ckpt, _ = trained
    copy = tmp_path / "ckpt"
    shutil.copytree(ckpt, copy)
    step4 = copy / "global_step4"
    states = next(step4.rglob("*model_states.pt"))
    data = WeightsOnlyCheckpointEngine().load(str(states), map_location="cpu")
    name = next(iter(data["module"]))
    data["module"][name] = torch.full_like(data["module"][name], math.inf)
    torch.save(data, states)
    meta = json.loads((step4 / storage.MANIFEST).read_text())["metadata"]
    storage.commit_dir(step4, step4, metadata={k: v for k, v in meta.items() if k != finite.FINITE})
    resume_point._verified.clear()
    found = resume_point.find_latest(str(copy))
    assert found is not None and found.name == "global_step2"
    assert f"checkpoint {step4} holds non-finite weights" in caplog.text and name in caplog.text


def test_a_resume_from_another_runs_checkpoints_is_refused(trained, tmp_path):
    """Two runs one after the other on one --ckpt_path: the second (another seed) is refused before any
    weights load, naming the difference; the checkpoints stay as they were."""
    _, out, ckpt, _ = trained
    before = tree(ckpt)
    run = sft(["--pretrain", str(out), "--save_path", str(tmp_path / "m"), "--ckpt_path", str(ckpt), "--max_steps",
               "4", "--save_steps", "2", "--load_checkpoint", "--seed", "4"])  # fmt: skip
    lines = error_lines(run)
    assert run.returncode == 2 and len(lines) == 1, run.stderr[-3000:]
    assert (
        f"checkpoint {ckpt}/global_step4 belongs to another run (config differs: --seed 3 there vs 4 here)" in lines[0]
    )
    assert "Loading weights" not in run.stderr and tree(ckpt) == before


def test_default_paths_checkpoint_inside_the_output_resume_after_kill9_and_commit(tiny_base, tmp_path):
    """No --save_path or --ckpt_path: the defaults ./ckpt and ./ckpt/checkpoints (OpenRLHF's layout too: its
    scripts put --ckpt.path <save>/ckpt). A run killed -9 after step 2 resumes from its checkpoint and commits its
    model beside the checkpoints; a longer run resumes from those and commits again; the checkpoints stay, named by
    no model manifest, and the model loads with plain from_pretrained."""
    from transformers import AutoModelForCausalLM

    from tests.conftest import kill9_after_step

    args = ["--pretrain", str(tiny_base), "--save_steps", "1"]
    kill9_after_step("alignment.cli.train_sft", [*SFT, *args, "--max_steps", "4"], 2, cwd=tmp_path)
    out, ckpt = tmp_path / "ckpt", tmp_path / "ckpt" / "checkpoints"
    assert (ckpt / "global_step2" / storage.MANIFEST).exists() and not (out / storage.MANIFEST).exists()
    first = sft([*args, "--max_steps", "3", "--load_checkpoint"], cwd=tmp_path)
    assert first.returncode == 0 and "(step 2," in first.stderr, first.stderr[-3000:]
    again = sft([*args, "--max_steps", "4", "--load_checkpoint"], cwd=tmp_path)
    assert again.returncode == 0 and "(step 3," in again.stderr, again.stderr[-3000:]
    assert (ckpt / "global_step4" / storage.MANIFEST).exists()
    assert not any(k.startswith("checkpoints/") for k in storage.read_manifest(out)["files"])
    assert AutoModelForCausalLM.from_pretrained(out).config.model_type == "llama"
