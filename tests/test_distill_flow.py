"""The distill flow for real (Prefect ephemeral API -> Ray jobs on the session's head): an SFT student, then
on-policy distillation from a teacher the run did not make, placed on its own Ray group, with held-out
evaluation of the teacher, the student before and the student after — the teacher's result saved in this
run's folder, not beside the teacher. Budgets are a few steps: what distillation gains is measured in
docs/distillation.md, not here."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from alignflow.flows.distill import distill_flow
from alignment import storage
from alignment.config import ConfigError
from tests.test_ray_ranks import job_log

pytestmark = pytest.mark.integration


# make test-extended: CI runs OpenRLHF's on-policy distillation line as a job (tests/test_opd.py) and flows that chain
# committed stages in tests/test_gates_and_compare.py
@pytest.mark.extended
def test_sft_student_then_opd_from_a_given_teacher(ray_head, tiny_base, tiny_sft, tmp_path):
    teacher = tmp_path / "teacher" / "model"
    shutil.copytree(tiny_sft, teacher)
    store = tmp_path / "store"
    result = asyncio.run(
        distill_flow(
            teacher=str(teacher),
            method="opd",
            run_name="distill",
            store=str(store),
            ray_address=ray_head,
            recipe="tiny",
            sft={"pretrain": str(tiny_base), "max_steps": 2},
            # the teacher on its own Ray group: one replica beside the student's rank
            opd={"max_steps": 2, "eval_steps": -1, "save_steps": -1, "teacher_num_nodes": 1},
            heldout_eval=True,
        )
    )
    assert list(result) == ["teacher", "sft", "opd", "evaluate sft", "evaluate opd", "evaluate teacher"]
    config = storage.read_manifest(result["opd"]["model_uri"])["metadata"]["config"]
    assert config["pretrain"] == result["sft"]["model_uri"] and config["teacher_model"] == str(teacher)
    assert "eval/kl" in result["opd"]["metrics"]
    log = job_log(ray_head, "distill", "opd")
    assert "teacher on its own Ray group: --teacher_num_nodes 1 x --teacher_num_gpus_per_node 1" in log, log[-3000:]
    assert "teacher: a replica of its own Ray group" in log, log[-3000:]
    # the teacher (the SFT recipe's model) answers better than a student two SFT steps from random init
    assert result["teacher"]["heldout"]["accuracy"] > result["sft"]["heldout"]["accuracy"]
    # the teacher's evaluation is an evaluate stage of this run (nothing is written beside the given teacher)
    assert sorted(p.name for p in teacher.parent.iterdir()) == ["model"]
    assert result["teacher"]["heldout"]["eval_uri"] == result["evaluate teacher"]["model_uri"]


def test_the_other_methods_overrides_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="method=kd runs the kd stage; the opd overrides would be ignored"):
        asyncio.run(
            distill_flow(
                teacher=str(tmp_path), method="kd", store=str(tmp_path / "store"), recipe="tiny", opd={"max_steps": 2}
            )
        )
