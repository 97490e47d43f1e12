"""A two-node Ray cluster on this machine (a head and a second raylet joined with
`ray start --address`, loopback, one CPU each): a PPO stage whose actor group has one rank per
node (`--actor_num_nodes 2`) is submitted as a Ray job, its ranks land on both nodes, form one
gloo group across them and finish."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO, metric_rows
from tests.test_ppo_ray import PROMPTS, ray_job

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_nodes():
    from alignflow.tasks.ray_cluster import local_head
    with local_head(num_cpus=1, extra_nodes=1) as url:
        yield url


def test_actor_ranks_span_both_nodes(two_nodes, tiny_base, tmp_path):
    from ray.util.state import list_nodes
    out = tmp_path / "ppo"
    args = ["--pretrain", str(tiny_base), "--save_path", str(out), *PROMPTS, "--label_key", "label",
            "--remote_rm_url", str(REPO / "alignment/tiny_world/reward.py"), "--advantage_estimator", "group_norm",
            "--n_samples_per_prompt", "2", "--actor_num_nodes", "2", "--actor_num_gpus_per_node", "1",
            "--ref_num_nodes", "2", "--ref_num_gpus_per_node", "1", "--colocate_actor_ref",
            "--rollout_batch_size", "4", "--micro_rollout_batch_size", "8", "--train_batch_size", "8",
            "--micro_train_batch_size", "4", "--max_samples", "8", "--generate_max_len", "8"]
    status, logs = ray_job(two_nodes, args, "ppo-two-nodes")
    assert status.endswith("SUCCEEDED"), logs[-3000:]
    nodes = {n.node_id[:12] for n in list_nodes(address=two_nodes)}
    placed = re.search(r"ranks by Ray node \(2 nodes in the cluster\): actor (\w+) (\w+); ref (\w+) (\w+)", logs)
    assert placed, logs[-3000:]
    actor, ref = set(placed.group(1, 2)), set(placed.group(3, 4))
    assert len(nodes) == 2 and actor == nodes and ref == nodes, (placed.group(0), nodes)
    assert "placed actor 2x1, ref 2x1 on actor's bundles" in logs and "ran iterations 1..2 of 2" in logs
    assert [r["step"] for r in metric_rows(out)] == [1, 2] and (out / "MANIFEST.json").exists()


def test_sft_stage_with_spread_places_one_rank_per_node(two_nodes, tiny_base, tmp_path):
    """The `sft` flow on the two-node cluster with --num_nodes 2 --placement_strategy SPREAD: one rank
    per node, one gloo group across them, one committed model."""
    from ray.util.state import list_nodes

    from tests.test_ray_ranks import TWO_RANKS, job_log
    from tests.test_stage_runner import run_flow
    result, _ = run_flow(run_name="spread", store=str(tmp_path / "store"), ray_address=two_nodes,
                         sft={**TWO_RANKS, "pretrain": str(tiny_base), "num_nodes": 2, "num_gpus_per_node": 1,
                              "placement_strategy": "SPREAD", "max_steps": 4})
    log = job_log(two_nodes, "spread", "sft")
    placed = dict(re.findall(r"rank (\d) of 2 on Ray node (\w+)", log))
    nodes = {n.node_id for n in list_nodes(address=two_nodes)}
    assert set(placed) == {"0", "1"} and placed["0"] != placed["1"] and set(placed.values()) == nodes, log[-3000:]
    assert (tmp_path / "store").exists() and (Path(result["model_uri"]) / "MANIFEST.json").exists()
    assert len(metric_rows(Path(result["model_uri"]))) == 4
