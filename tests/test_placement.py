"""Which PPO model groups exist, which share bundles, and the error when the cluster is too small."""

from __future__ import annotations

import pytest

from alignment.config import ConfigError, parse_args
from alignment.config.ppo import PPOConfig
from alignment.distributed.cluster import bundles_needed, check_resources, split_cores, threads_per_rank
from alignment.distributed.placement import ask, plan

BASE = ["--pretrain", "sft", "--reward_pretrain", "rm", "--prompt_data", "p.jsonl"]


def layout(*extra: str) -> dict[str, tuple[str, float]]:
    return {g.role: (g.bundle_set, g.share) for g in plan(parse_args(PPOConfig, [*BASE, *extra]))}


def test_openrlhf_readme_colocation_needs_two_bundle_sets():
    groups = plan(parse_args(PPOConfig, [*BASE, "--colocate_actor_ref", "--colocate_critic_reward"]))
    assert {g.role: (g.bundle_set, g.share) for g in groups} == {
        "actor": ("actor", 0.5),
        "ref": ("actor", 0.5),
        "critic": ("critic", 0.5),
        "reward": ("critic", 0.5),
    }
    assert bundles_needed(groups) == {"actor": 1, "critic": 1}


def test_colocate_all_models_shares_one_set_four_ways():
    assert set(layout("--colocate_all_models").values()) == {("all", 0.25)}


def test_critic_free_and_function_reward_place_fewer_groups():
    assert set(layout("--advantage_estimator", "rloo", "--n_samples_per_prompt", "2")) == {"actor", "ref", "reward"}
    assert set(
        layout("--remote_rm_url", "r.py", "--advantage_estimator", "group_norm", "--n_samples_per_prompt", "2")
    ) == {"actor", "ref"}


def test_multi_rank_groups_count_bundles_per_set():
    groups = plan(
        parse_args(
            PPOConfig,
            [
                *BASE,
                "--actor_num_gpus_per_node",
                "2",
                "--ref_num_gpus_per_node",
                "2",
                "--colocate_actor_ref",
                "--critic_num_nodes",
                "2",
            ],
        )
    )
    assert bundles_needed(groups) == {"actor": 2, "critic": 2, "reward": 1}
    assert threads_per_rank(groups, cores=8) == 4 and threads_per_rank(groups, cores=8, num_threads=3) == 3


def test_too_small_a_cluster_is_one_clear_error():
    groups = plan(parse_args(PPOConfig, BASE))
    with pytest.raises(
        ConfigError,
        match=r"the model groups \(actor 1x1, critic 1x1, ref 1x1, reward 1x1\) need 4 CPU \(one CPU per bundle: "
        r"this Ray cluster has no GPUs\), but the Ray cluster has 2; colocate groups",
    ):
        check_resources(groups, {"CPU": 2.0}, ask(groups))
    assert check_resources(groups, {"CPU": 4.0}, ask(groups)) == (False, {"CPU": 1.0})
    with pytest.raises(ConfigError, match=r"need 4 CPU \(a GPU and a CPU per bundle\), but the Ray cluster has 2"):
        check_resources(groups, {"CPU": 2.0, "GPU": 8.0}, ask(groups))  # a bundle is a GPU and a CPU


def test_vllm_engines_get_their_own_bundles_and_cores():
    groups = plan(
        parse_args(
            PPOConfig,
            [
                *BASE,
                "--remote_rm_url",
                "r.py",
                "--advantage_estimator",
                "rloo",
                "--n_samples_per_prompt",
                "2",
                "--colocate_actor_ref",
                "--vllm_num_engines",
                "2",
            ],
        )
    )
    assert {g.role: (g.bundle_set, g.share) for g in groups} == {
        "actor": ("actor", 0.5),
        "ref": ("actor", 0.5),
        "vllm": ("vllm", 1.0),
    }
    assert bundles_needed(groups) == {"actor": 1, "vllm": 2}
    assert threads_per_rank(groups, cores=4) == 4  # engines don't count as trainer ranks
    assert split_cores(4, 1) == ([0], [1, 2, 3]) and split_cores(2, 2) == ([0, 1], [0, 1])
    assert layout("--colocate_all_models", "--vllm_num_engines", "1")["vllm"] == ("all", 0.2)


def test_tensor_parallel_engines_take_bundles_of_one_node():
    from alignment.ppo.engines import engine_bundles, ray_executor_env

    one_node = {b: "n1" for b in range(4)}
    assert engine_bundles(one_node, 2, 2) == [[0, 1], [2, 3]]
    assert engine_bundles(one_node, 3, 1) == [[0], [1], [2]]
    # Ray may interleave a placement group's bundles over nodes: an engine still gets one node's bundles
    two_nodes = {0: "a", 1: "b", 2: "a", 3: "b"}
    assert engine_bundles(two_nodes, 2, 2) == [[0, 2], [1, 3]]
    with pytest.raises(ConfigError, match="engine 0's 2 bundles would span nodes.*1, 1 per node"):
        engine_bundles({0: "a", 1: "b"}, 1, 2)
    # GPU engines: vLLM's Ray executor puts one worker on each bundle, asking the GPU share colocation leaves
    assert ray_executor_env([2, 3], 0.2) == {"VLLM_RAY_BUNDLE_INDICES": "2,3", "VLLM_RAY_PER_WORKER_GPUS": "0.2"}
    assert ray_executor_env([0, 1], 1.0)["VLLM_RAY_PER_WORKER_GPUS"] == "1"
