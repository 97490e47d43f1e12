"""A two-node Ray cluster on this machine (a head and a second raylet joined with
`ray start --address`, loopback, one CPU each): a PPO stage whose actor group has one rank per
node (`--actor_num_nodes 2`) is submitted as a Ray job, its ranks land on both nodes, form one
gloo group across them and finish; an SFT flow spreads its ranks the same way. Both checkpoint to S3,
every node uploading its own ranks' files: nothing assumes a disk shared by the nodes."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO, metric_rows
from tests.fixtures_s3 import point_env_at
from tests.ppo_ray_jobs import PROMPTS, ray_job

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_nodes(moto_endpoint):
    """Started with the suite's S3 settings in its environment, as a real cluster has its credentials."""
    from alignflow.tasks.cluster.ray_cluster import local_head

    with pytest.MonkeyPatch.context() as mp:
        point_env_at(mp, moto_endpoint)
        with local_head(num_cpus=1, extra_nodes=1) as url:
            yield url


# make test-extended: CI proves ranks across two nodes by the SFT stage below (one placement module for both)
@pytest.mark.extended
def test_actor_ranks_span_both_nodes(two_nodes, tiny_base, tmp_path, s3_root):
    """A PPO stage whose actor ranks span both nodes, checkpointing to S3: each actor rank uploads its
    own ZeRO shard (the driver, which commits, holds none of them) and the commit lists both."""
    from ray.util.state import list_nodes

    from alignment import storage

    out = tmp_path / "ppo"
    args = [
        "--pretrain",
        str(tiny_base),
        "--save_path",
        str(out),
        *PROMPTS,
        "--label_key",
        "label",
        "--remote_rm_url",
        str(REPO / "alignment/tiny_world/reward.py"),
        "--advantage_estimator",
        "group_norm",
        "--n_samples_per_prompt",
        "2",
        "--actor_num_nodes",
        "2",
        "--actor_num_gpus_per_node",
        "1",
        "--ref_num_nodes",
        "2",
        "--ref_num_gpus_per_node",
        "1",
        "--colocate_actor_ref",
        "--rollout_batch_size",
        "4",
        "--micro_rollout_batch_size",
        "8",
        "--train_batch_size",
        "8",
        "--micro_train_batch_size",
        "4",
        "--max_samples",
        "8",
        "--generate_max_len",
        "8",
        "--ckpt_path",
        f"{s3_root}/ckpt",
        "--save_steps",
        "2",
    ]
    status, logs = ray_job(two_nodes, args, "ppo-two-nodes")
    assert status.endswith("SUCCEEDED"), logs[-3000:]
    nodes = {n.node_id[:12] for n in list_nodes(address=two_nodes)}
    placed = re.search(r"ranks by Ray node \(2 nodes in the cluster\): actor (\w+) (\w+); ref (\w+) (\w+)", logs)
    assert placed, logs[-3000:]
    actor, ref = set(placed.group(1, 2)), set(placed.group(3, 4))
    assert len(nodes) == 2 and actor == nodes and ref == nodes, (placed.group(0), nodes)
    assert "placed actor 2x1, ref 2x1 on actor's bundles" in logs and "ran iterations 1..2 of 2" in logs
    assert [r["step"] for r in metric_rows(out)] == [1, 2] and (out / "MANIFEST.json").exists()
    files = storage.read_manifest(f"{s3_root}/ckpt/global_step2")["files"]
    shards = {
        m.group(1) for f in files if (m := re.fullmatch(r"actor/.*zero_pp_rank_(\d)_mp_rank_00_optim_states\.pt", f))
    }
    assert shards == {"0", "1"} and "state.json" in files, sorted(files)


def test_sft_stage_with_spread_places_one_rank_per_node_and_checkpoints_both_to_s3(
    two_nodes, tiny_base, s3_root, monkeypatch
):
    """The `sft` flow on the two-node cluster with --num_nodes 2 --placement_strategy SPREAD and its store
    on S3: one rank per node, one gloo group across them. Each node stages its ranks' checkpoint files in
    its own folder (no shared disk needed) and uploads them, so a committed checkpoint holds both ranks'
    ZeRO shards; a run that failed after step 3 resumes from step 2 on both nodes and commits the model."""
    from ray.util.state import list_nodes

    from alignment import storage
    from tests.flow_runs import run_flow
    from tests.test_ray_ranks import TWO_RANKS, job_log

    sft = {
        **TWO_RANKS,
        "pretrain": str(tiny_base),
        "num_nodes": 2,
        "num_gpus_per_node": 1,
        "placement_strategy": "SPREAD",
        "max_steps": 4,
        "save_steps": 2,
    }
    monkeypatch.setenv("ALIGNFLOW_FAIL_AT_STEP", "3")
    with pytest.raises(Exception, match="simulated failure after step 3"):
        run_flow(run_name="spread", store=s3_root, ray_address=two_nodes, sft=sft, retries=0)
    monkeypatch.delenv("ALIGNFLOW_FAIL_AT_STEP")
    result, _ = run_flow(run_name="spread", store=s3_root, ray_address=two_nodes, sft=sft)
    log = job_log(two_nodes, "spread", "sft")
    placed = dict(re.findall(r"rank (\d) of 2 on Ray node (\w+)", log))
    nodes = {n.node_id for n in list_nodes(address=two_nodes)}
    assert set(placed) == {"0", "1"} and placed["0"] != placed["1"] and set(placed.values()) == nodes, log[-3000:]
    assert "global_step2 (step 2" in log and "ran optimizer steps 3..4 of 4" in log, log[-3000:]
    ckpts = result["model_uri"].rsplit("/", 1)[0] + "/checkpoints"
    for step in (2, 4):
        files = storage.read_manifest(f"{ckpts}/global_step{step}")["files"]
        shards = {
            m.group(1)
            for f in files
            if (m := re.fullmatch(r"model/.*zero_pp_rank_(\d)_mp_rank_00_optim_states\.pt", f))
        }
        assert shards == {"0", "1"} and "state.json" in files, sorted(files)
    assert storage.is_committed(result["model_uri"])
    assert len(storage.read_text(storage.file_in(result["model_uri"], "metrics.jsonl")).splitlines()) == 4
