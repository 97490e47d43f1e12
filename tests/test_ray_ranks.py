"""Every training stage places its ranks on the Ray cluster (rank actors in a placement group,
alignment.distributed.ray_ranks).

Unit: the resource check, the launcher rule and each rank's environment. Integration (Prefect ephemeral
API -> Ray job on the session's 2-CPU head -> rank actors -> DeepSpeed on gloo): the `sft` flow with 2 ranks matches
`torchrun --nproc_per_node 2` step for step and runs from the shipped code outside the checkout;
3 ranks on 2 CPUs are refused in one line before any model loads. Elsewhere: RM on 2 ranks
(tests/test_deployment.py), DPO and batch inference on 2 ranks (tests/test_iterative_dpo_flow.py),
SPREAD over two nodes (tests/test_multinode.py), kill -9 of a rank (tests/test_stage_runner.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from alignflow.tasks.cluster.ray_job import StageInputRefused, job_env, runtime_env
from alignflow.tasks.orchestration.stage_spec import build_config
from alignment.config import ConfigError, SFTConfig
from alignment.config.cli import config_to_argv
from alignment.distributed import ports, rank_actor, ray_ranks
from tests.conftest import REPO, launcher, losses, run_module
from tests.flow_runs import ray_jobs, run_flow
from tests.test_same_arithmetic import golden


def cfg(**kw) -> SFTConfig:
    return SFTConfig(pretrain="m", dataset="d", **kw).validate()


def test_resource_check_names_what_is_missing():
    assert ray_ranks.check_resources(cfg(num_gpus_per_node=2), {"CPU": 2.0}) == (False, {"CPU": 1.0})
    with pytest.raises(
        ConfigError,
        match=r"--num_nodes 1 x --num_gpus_per_node 3 = 3 ranks need 3 CPU \(one CPU per "
        r"rank: this Ray cluster has no GPUs\), but the Ray cluster has 2",
    ):
        ray_ranks.check_resources(cfg(num_gpus_per_node=3), {"CPU": 2.0})
    assert ray_ranks.check_resources(cfg(num_nodes=2, num_gpus_per_node=4), {"CPU": 64.0, "GPU": 8.0})[0]
    with pytest.raises(ConfigError, match="need 16 GPU"):
        ray_ranks.check_resources(cfg(num_nodes=2, num_gpus_per_node=8), {"CPU": 64.0, "GPU": 8.0})
    with pytest.raises(
        ConfigError, match=r"--accelerator_type H100: the Ray cluster has no such accelerator \(it has: A100\)"
    ):
        ray_ranks.check_resources(cfg(accelerator_type="H100"), {"CPU": 8.0, "GPU": 8.0, "accelerator_type:A100": 1.0})
    with pytest.raises(ConfigError, match="--placement_strategy"):
        cfg(placement_strategy="ANYWHERE")


def test_ranks_are_numbered_node_by_node_and_share_their_nodes_gpus():
    """A node's ranks get contiguous RANKs (RANK - LOCAL_RANK names the node) and, on GPUs, see the
    node's GPUs of the stage with LOCAL_RANK their own one, whatever order the actors landed in."""
    L = rank_actor.Landing
    cpu = rank_actor.rank_envs([L("b", "10.0.0.2"), L("a", "10.0.0.1"), L("b", "10.0.0.2"), L("a", "10.0.0.1")])
    assert [(e["RANK"], e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"]) for e in cpu] == [
        ("0", "0", "2"),
        ("2", "0", "2"),
        ("1", "1", "2"),
        ("3", "1", "2"),
    ]
    assert {e["MASTER_ADDR"] for e in cpu} == {"10.0.0.2"} and {e["WORLD_SIZE"] for e in cpu} == {"4"}
    assert not any("CUDA_VISIBLE_DEVICES" in e for e in cpu)
    gpu = rank_actor.rank_envs(
        [L("a", "ip1", ("3",)), L("b", "ip2", ("0",)), L("a", "ip1", ("1",)), L("a", "ip1", ("10",))]
    )
    assert [(e["RANK"], e["LOCAL_RANK"], e["CUDA_VISIBLE_DEVICES"]) for e in gpu] == [
        ("1", "1", "1,3,10"),
        ("3", "0", "0"),
        ("0", "0", "1,3,10"),
        ("2", "2", "1,3,10"),
    ]
    assert {int(gpu[i]["RANK"]) - int(gpu[i]["LOCAL_RANK"]) for i in (0, 2, 3)} == {0}  # node a's ranks


def test_master_port_is_free_and_outside_the_ephemeral_range(monkeypatch):
    """MASTER_PORT is bound moments after it is chosen: from the ephemeral range an outgoing
    connection could take it first (EADDRINUSE), so it comes from below the range."""
    import socket

    chosen = {ports.free_port("127.0.0.1", ephemeral_low=32768) for _ in range(20)}
    assert all(20000 <= p < 32768 for p in chosen), chosen
    with socket.socket() as held:  # the only candidate is taken: the kernel picks one
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(ports, "_LOWEST", taken)
        assert ports.free_port("127.0.0.1", ephemeral_low=taken + 1) != taken
    assert ports.free_port("127.0.0.1", ephemeral_low=1024) > 0  # no room below the range


def test_launcher_sets_the_world_and_ray_is_used_otherwise(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "RAY_ADDRESS"):
        monkeypatch.delenv(k, raising=False)
    assert not ray_ranks.on_ray(cfg()) and ray_ranks.on_ray(cfg(num_gpus_per_node=2))
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")  # a Ray job: ranks go on the cluster
    assert ray_ranks.on_ray(cfg())
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")  # torchrun / deepspeed / a Ray rank actor
    assert not ray_ranks.on_ray(cfg()) and not ray_ranks.on_ray(cfg(num_gpus_per_node=2))
    with pytest.raises(ConfigError, match="= 4 ranks, but the launcher started 2"):
        ray_ranks.on_ray(cfg(num_nodes=2, num_gpus_per_node=2))


def test_ray_daemon_lines_are_no_heartbeat():
    """With RAY_DEDUP_LOGS=0 a raylet warns into the job log every 10 s while the disk is over 95 %
    full: a hung stage must still go quiet."""
    from alignflow.tasks.cluster.ray_job import is_heartbeat

    disk = (
        "(raylet) [2026-11-27 11:09:34,911 E 30493 30504] (raylet) file_system_monitor.cc:116: "
        "/tmp/ray/session_x is over 95% full, available space: 8.76 GB"
    )
    assert not is_heartbeat(disk) and not is_heartbeat("(raylet, ip=10.0.0.2) disk over 95% full")
    assert not is_heartbeat("(gcs_server) something") and not is_heartbeat("(autoscaler +1m) Adding 1 node")
    assert is_heartbeat('(StageRank pid=23867) @alignflow {"step":2,"total":4,"samples":64}')
    assert is_heartbeat("2026-11-27 08:40:10,023 [rank0] INFO alignment.distributed.ray_ranks: train_sft: placing")
    assert is_heartbeat("(raylets are fine in a user's own words) step 3")


def test_job_env_and_shipped_code(monkeypatch):
    monkeypatch.setenv("ALIGNFLOW_JOB_ENV", "MY_SETTING, HF_HOME")
    monkeypatch.setenv("MY_SETTING", "x")
    monkeypatch.delenv("HF_HOME", raising=False)
    env = job_env()
    assert env["MY_SETTING"] == "x" and "HF_HOME" not in env and env["PYTHONUNBUFFERED"] == "1"
    assert env["RAY_DEDUP_LOGS"] == "0"  # else rank 1's placement line can vanish from the job log
    assert runtime_env(env)["py_modules"] == [str(REPO / "alignment")]


# A short tiny-world SFT with 2 ranks: 32 samples per step = 2 ranks x 16.
TWO_RANKS = {
    "max_steps": 8,
    "save_steps": -1,
    "eval_dataset": None,
    "logging_steps": 1,
    "train_batch_size": 32,
    "micro_train_batch_size": 16,
    "num_gpus_per_node": 2,
}


def job_log(address: str, run_name: str, stage: str) -> str:
    from ray.job_submission import JobSubmissionClient

    jobs = [j for j in ray_jobs(address, run_name) if j.metadata["alignflow_stage"] == stage]
    return JobSubmissionClient(address).get_job_logs(jobs[-1].submission_id)


@pytest.mark.integration
def test_sft_flow_with_two_ranks_equals_torchrun(ray_head, tiny_base, tmp_path):
    result, _ = run_flow(
        run_name="ranks",
        store=str(tmp_path / "store"),
        ray_address=ray_head,
        sft={**TWO_RANKS, "pretrain": str(tiny_base)},
    )
    placed = Path(result["model_uri"])
    log = job_log(ray_head, "ranks", "sft")
    assert "train_sft: placing 2 rank(s) ({'CPU': 1.0} per rank, PACK)" in log, log[-3000:]
    assert len(set(re.findall(r"rank [01] of 2 on Ray node (\w+)", log))) == 1  # PACK on a one-node cluster
    assert re.findall(r"rank [01] of 2 on Ray node \w+, nice (\d+)", log) == ["0", "0"], log[-3000:]  # not Ray's 15
    code = re.search(r"code from (\S+), working directory (\S+)", log)
    assert code and "runtime_resources" in code.group(1) and not code.group(1).startswith(str(REPO)), log[-3000:]
    assert not code.group(2).startswith(str(REPO))  # the job ran outside the checkout

    # the same config under torchrun, as a user would launch it
    config = build_config(
        "sft",
        str(REPO / "deployments/recipes/tiny/sft.yaml"),
        {**TWO_RANKS, "pretrain": str(tiny_base), "num_gpus_per_node": 1},
    )
    out = tmp_path / "torchrun"
    run_module("alignment.cli.train_sft", [*config_to_argv(config), "--save_path", str(out)], launcher("torchrun", 2))
    ray, torchrun = losses(placed), losses(out)
    assert len(ray) == 8 and max(abs(a - b) for a, b in zip(ray, torchrun)) < 1e-5, (ray, torchrun)
    # and both are what this command logged before the restructuring of 2026-11-29 (tests/test_same_arithmetic.py)
    assert torchrun == pytest.approx(golden("sft_2_ranks"), rel=1e-5, abs=1e-6), torchrun
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(placed).config.model_type == "llama"


@pytest.mark.integration
def test_three_ranks_on_two_cpus_are_refused_before_any_model_loads(ray_head, tiny_base, tmp_path):
    with pytest.raises(StageInputRefused, match=r"3 ranks need 3 CPU .* but the Ray cluster has 2; use fewer ranks"):
        run_flow(
            run_name="toomany",
            store=str(tmp_path / "store"),
            ray_address=ray_head,
            retries=0,
            sft={**TWO_RANKS, "pretrain": str(tiny_base), "num_gpus_per_node": 3, "train_batch_size": 48},
        )
    log = job_log(ray_head, "toomany", "sft")
    assert "Loading weights" not in log and "placing" not in log
    assert len([ln for ln in log.splitlines() if ln.startswith("error: ")]) == 1, log
