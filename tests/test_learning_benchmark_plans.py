"""How benchmarks/learning.py plans each method's stages, without a cluster: rounds chained, conditional SFT asked for
each score, distillation from the seed's teacher, agent RL through its environment, the SmolLM2 recipe's RL stages
and what it refuses, PPO's critic colocated with the RM. The benchmark run end to end, its page and the rows it
keeps: tests/test_learning_benchmark.py."""

from __future__ import annotations

import json

import pytest

from tests.benchmark_modules import load_benchmark
from tests.conftest import REPO

pytestmark = pytest.mark.integration


def test_round_based_methods_chain_their_rounds(tmp_path):
    """Iterative DPO as the benchmark plans it (no cluster): each round generates with the previous round's model
    and trains the next from it, configured by the tiny-idpo recipe; the last round's model is evaluated."""
    from alignflow.tasks.orchestration import pipeline
    from alignflow.tasks.orchestration.recipes import load_recipe

    learning = load_benchmark()
    steps = learning.steps(str(REPO / "data"), ["iterative-dpo"], [42], {})
    name = "iterative-dpo seed 42"
    assert [s.name for s in steps] == [
        "evaluate sft",
        *(f"{name} {part}" for part in ("generate 1", "round 1", "generate 2", "round 2", "generate 3")),
        name,
        f"evaluate {name}",
    ]
    planned = pipeline.plan(steps, load_recipe("tiny"), str(tmp_path / "store"), "learning")
    round1, round2 = planned[f"{name} round 1"], planned[f"{name} round 2"]
    assert planned[f"{name} generate 2"].cfg.pretrain == round1.model_uri == round2.cfg.pretrain
    assert round2.cfg.dataset == f"{planned[f'{name} generate 2'].model_uri}/output.jsonl"
    assert [planned[f"{name} generate {k}"].cfg.iter for k in (1, 2, 3)] == [0, 1, 2]
    assert planned[f"{name} generate 1"].cfg.post_processor == "iter_dpo" and round1.cfg.learning_rate == 2e-4
    assert planned[f"evaluate {name}"].cfg.pretrain == planned[name].model_uri


def test_conditional_sft_is_evaluated_asking_for_each_score_and_without_a_prefix(tmp_path):
    """Conditional SFT as the benchmark plans it (no cluster): the SFT start's samples scored (tiny-csft's
    score.yaml), SFT on them, then one evaluation per asked-for score with the prefix SFT learned, and one
    without; the page reads the three figures from the run."""
    from alignflow.tasks.orchestration import pipeline
    from alignflow.tasks.orchestration.recipes import load_recipe

    learning = load_benchmark()
    sft = str(REPO / "data")
    name = "conditional-sft seed 42"
    planned = pipeline.plan(
        learning.steps(sft, ["conditional-sft"], [42], {}), load_recipe("tiny"), str(tmp_path / "s"), "learning"
    )
    assert planned[f"{name} score"].cfg.post_processor == "csft" and planned[f"{name} score"].cfg.seed == 42
    assert planned[name].cfg.dataset == f"{planned[f'{name} score'].model_uri}/output.jsonl"
    asked = {k: planned[f"evaluate {k}"].cfg for k in (name, f"{name} asked 0.0", f"{name} unsteered")}
    assert {k: (c.pretrain, c.enable_csft, c.csft_reward) for k, c in asked.items()} == {
        name: (planned[name].model_uri, True, 1.0),
        f"{name} asked 0.0": (planned[name].model_uri, True, 0.0),
        f"{name} unsteered": (planned[name].model_uri, False, 1.0),
    }
    assert asked[name].csft_prompt == planned[f"{name} score"].cfg.csft_prompt
    run = {"seed": 42, "steered": {"1.0": 0.8, "0.0": 0.1, "none": 0.7}}
    row = {"reward": "rule", "runs": [run], "mean": 0.8, "spread": 0.0, "gain": 0.1, "wall_s": 1.0}
    from benchmarks.learning_page import markdown

    page = markdown(
        {"sft_accuracy": 0.7, "methods": {"conditional-sft": {**row, "measured": {"how": "x", "date": "d"}}}}, None
    )
    assert "conditional-sft, seed 42: 80.0 % asking for 1.0, 10.0 % asking for 0.0, 70.0 % with no prefix." in page


def test_a_distilled_student_learns_from_its_seeds_teacher_planned_once(tmp_path):
    """kd and opd (no cluster): the SFT start is the student, the teacher method's model of the same seed the
    teacher; the teacher's stage is planned once, whether it is measured too or not."""
    from alignflow.tasks.orchestration import pipeline
    from alignflow.tasks.orchestration.recipes import load_recipe

    learning = load_benchmark()
    sft = str(REPO / "data")
    steps = learning.steps(sft, ["kd", "grpo-rule", "opd"], [42], {})
    names = [s.name for s in steps]
    assert len(names) == len(set(names)) and names.count("grpo-rule seed 42") == 1
    planned = pipeline.plan(steps, load_recipe("tiny"), str(tmp_path / "s"), "learning")
    teacher = planned["grpo-rule seed 42"].model_uri
    for m in ("kd", "opd"):
        assert planned[f"{m} seed 42"].cfg.teacher_model == teacher and planned[f"{m} seed 42"].cfg.pretrain == sft
        assert planned[f"evaluate {m} seed 42"].cfg.pretrain == planned[f"{m} seed 42"].model_uri
    assert learning.METHODS["kd"].reward == "teacher (grpo-rule)"


def test_agent_rl_trains_grpos_stage_through_the_environment_and_its_file_is_the_rows_recipe(tmp_path):
    """agent-grpo (no cluster): grpo.yaml's stage, its reward the multi-turn environment's (no rule file beside
    it), evaluated as every row is; an edit of the environment makes its earlier row another recipe's."""
    from alignflow.tasks.orchestration import pipeline
    from alignflow.tasks.orchestration.recipes import load_recipe

    learning = load_benchmark()
    tiny = load_recipe("tiny")
    planned = pipeline.plan(learning.steps(str(REPO / "data"), ["agent-grpo"], [42], {}), tiny, str(tmp_path), "x")
    rl = planned["agent-grpo seed 42"].cfg
    assert rl.agent_func_path == str(REPO / "data" / "tiny" / "agent_retry.py") and rl.remote_rm_url is None
    assert (rl.advantage_estimator, rl.dynamic_filtering, rl.num_episodes) == ("group_norm", True, 2)
    assert planned["evaluate agent-grpo seed 42"].cfg.pretrain == planned["agent-grpo seed 42"].model_uri
    before = learning.recipe_digest(tiny, "agent-grpo")
    assert before != learning.recipe_digest(tiny, "grpo-rule")  # the same grpo.yaml; the environment differs
    edited = tmp_path / "repo"  # a copy of the repository's environment file, edited
    env = edited / "data" / "tiny" / "agent_retry.py"
    env.parent.mkdir(parents=True)
    env.write_bytes((REPO / "data" / "tiny" / "agent_retry.py").read_bytes() + b"#")
    learning.REPO = edited  # where recipe_digest reads the environment from
    assert learning.recipe_digest(tiny, "agent-grpo") != before


def test_the_smollm2_recipe_measures_its_rl_stages_on_the_sums_and_refuses_what_it_lacks(tmp_path, capsys):
    """--recipe smollm2 (no cluster): grpo-rule reads that recipe's grpo.yaml and its evaluation the 64 held-out
    sums; a method whose file the recipe lacks, or a round method of the tiny world, is refused before a stage
    runs (a stage with no file would start from the schema's defaults)."""
    from alignflow.tasks.orchestration import pipeline
    from alignflow.tasks.orchestration.recipes import load_recipe

    learning = load_benchmark()
    planned = pipeline.plan(
        learning.steps(str(REPO / "data"), ["grpo-rule"], [43], {}), load_recipe("smollm2"), str(tmp_path), "x"
    )
    rl, heldout = planned["grpo-rule seed 43"].cfg, planned["evaluate grpo-rule seed 43"].cfg
    smol = str(REPO / "data" / "smol")
    assert (rl.remote_rm_url, rl.prompt_data, rl.seed) == (f"{smol}/reward_func.py", f"json@{smol}/rl_prompts", 43)
    assert (heldout.dataset, heldout.remote_rm_url) == (f"json@{smol}/prompts", f"{smol}/reward_func.py")
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "MANIFEST.json").write_text(json.dumps({"files": {}}))
    start = [str(tmp_path / "sft"), "--recipe", "smollm2", "--store", str(tmp_path / "store")]
    assert learning.main([*start, "--methods", "grpo-rule,kto"]) == 2
    assert "--recipe smollm2: has no kto.yaml" in capsys.readouterr().err
    for method, own in (("iterative-dpo", "tiny"), ("agent-grpo", "tiny"), ("agent-grpo-pictures", "tiny-vision")):
        assert learning.main([*start, "--methods", method]) == 2
        assert f"rounds or environment are {own}'s; measure it with --recipe {own}" in capsys.readouterr().err
    assert learning.main([*start[:1], "--recipe", "no-such", "--methods", "dpo"]) == 2
    assert "--recipe: recipe 'no-such'" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()


def test_ppo_with_the_rm_colocates_its_critic_with_the_rm(tmp_path):
    """ppo-rm (no cluster): actor, reference, critic and RM are four models; GAE's critic shares the RM's bundle
    (--colocate_critic_reward) so that the stage fits the 2-CPU head the other RM rows run on (without it the
    stage refuses: 3 bundles on 2 CPUs)."""
    from alignflow.tasks.orchestration import pipeline
    from alignflow.tasks.orchestration.recipes import load_recipe

    learning = load_benchmark()
    planned = pipeline.plan(
        learning.steps(str(REPO / "data"), ["ppo-rm", "grpo-rm"], [42], {}), load_recipe("tiny"), str(tmp_path), "x"
    )
    gae, grpo = planned["ppo-rm seed 42"].cfg, planned["grpo-rm seed 42"].cfg
    assert (gae.advantage_estimator, gae.colocate_critic_reward, gae.colocate_actor_ref) == ("gae", True, True)
    assert gae.reward_pretrain == planned["rm"].model_uri and gae.critic_pretrain is None  # the critic: the RM
    assert grpo.advantage_estimator == "group_norm" and not grpo.colocate_critic_reward
