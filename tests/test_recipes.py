"""Recipes (deployments/recipes/<name>/<stage>.yaml): named by a run, or none at all; the merged
config of every stage is validated up front and published as an artifact."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from alignment import storage
from alignment.config import ConfigError, SFTConfig
from tests.conftest import REPO


def test_a_recipe_is_a_shipped_name_or_a_folder_and_anything_else_is_one_line(tmp_path):
    from alignflow.tasks.orchestration.recipes import load_recipe

    tiny = load_recipe("tiny")
    assert tiny.file("sft").endswith("deployments/recipes/tiny/sft.yaml") and tiny.has("tiny_base")
    assert tiny.has("dpo") and not load_recipe("smollm2").has("kto") and load_recipe(None).file("sft") is None
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "sft.yaml").write_text("learning_rate: 1.0e-5\n")
    assert load_recipe(str(tmp_path / "mine")).file("sft") == str(tmp_path / "mine" / "sft.yaml")
    with pytest.raises(ConfigError, match=r"recipe 'tinny': neither a shipped recipe \(llama3-8b, smollm2, tiny, "):
        load_recipe("tinny")


def test_the_plan_knows_every_output_uri_before_anything_runs_and_shows_no_secret(tmp_path):
    """A flow's stages are planned as a whole: the DPO stage is validated with the URI the SFT stage
    will commit to (no placeholder), and the configs artifact shows it."""
    from alignflow.tasks.orchestration import pipeline
    from alignflow.tasks.orchestration.pipeline import Output, Step
    from alignflow.tasks.orchestration.recipes import load_recipe

    recipe, store = load_recipe("smollm2"), str(tmp_path / "store")
    steps = [
        Step(
            "sft",
            "sft",
            "sft",
            {"pretrain": str(REPO / "data"), "use_wandb": "env", "learning_rate": 3e-5},
        ),
        Step("dpo", "dpo", "dpo", {}, {"pretrain": Output("sft")}),
    ]
    planned = pipeline.plan(steps, recipe, store, "mine")
    sft_uri = planned["sft"].model_uri
    assert sft_uri.startswith(f"{store}/mine/sft-") and sft_uri.endswith("/model")
    assert planned["dpo"].cfg.pretrain == sft_uri and planned["dpo"].inputs == {"pretrain": sft_uri}
    assert pipeline.plan(steps, recipe, store, "mine")["dpo"].model_uri == planned["dpo"].model_uri  # deterministic
    changed = [dataclasses.replace(steps[0], overrides={**steps[0].overrides, "learning_rate": 1e-5}), steps[1]]
    assert pipeline.plan(changed, recipe, store, "mine")["dpo"].model_uri != planned["dpo"].model_uri  # new upstream
    text = pipeline.configs_markdown("sft-dpo", "mine", recipe, planned)
    assert "## sft (`sft`)" in text and "## dpo (`dpo`)" in text and f"pretrain: {sft_uri}" in text
    assert "learning_rate: 3.0e-05" in text and "max_len: 128" in text and "use_wandb" not in text and "<" not in text
    with pytest.raises(ValueError, match="not an earlier step"):
        pipeline.plan(steps[::-1], recipe, store, "mine")


def test_demo_smol_runs_sft_grpo_on_the_sft_stage_sft_dpo_committed(tmp_path):
    """`make demo-smol`'s second flow (scripts/demo_smol.py) plans the same SFT stage as its first, so it is skipped,
    and its RL stage is the smollm2 recipe's GRPO on the verifiable reward and the RL prompts."""
    from alignflow.flows.sft_grpo import sft_grpo_steps
    from alignflow.tasks.orchestration import pipeline
    from alignflow.tasks.orchestration.pipeline import Output, Step
    from alignflow.tasks.orchestration.recipes import load_recipe

    sft = {"max_steps": 64, "max_epochs": 1, "learning_rate": 5e-5}
    base, recipe, store = str(tmp_path), load_recipe("smollm2"), str(tmp_path / "store")
    dpo_run = [
        Step("sft", "sft", "sft", {**sft, "pretrain": base}),
        Step("dpo", "dpo", "dpo", {}, {"pretrain": Output("sft")}),
    ]
    grpo_run = pipeline.plan(sft_grpo_steps(recipe, {**sft, "pretrain": base}, {}), recipe, store, "smol")
    assert grpo_run["sft"].model_uri == pipeline.plan(dpo_run, recipe, store, "smol")["sft"].model_uri
    rl = grpo_run["grpo"].cfg
    assert rl.remote_rm_url == str(REPO / "data/smol/reward_func.py") and rl.prompt_data.endswith(
        "data/smol/rl_prompts"
    )
    assert rl.pretrain == grpo_run["sft"].model_uri and rl.dynamic_filtering and rl.reward_pretrain is None


def test_sft_rm_ppo_given_a_reward_plans_no_reward_model_stage(tmp_path):
    """`sft-rm-ppo` with PPO's reward given (a reward function, or an RM URI) plans sft -> ppo, and PPO's
    validated config keeps that reward; without one it trains an RM from the SFT model and PPO reads it.
    (PPO with a reward function runs in tests/test_ppo_integration.py and tests/test_ppo_ray.py.)"""
    from alignflow.flows.sft_rm_ppo import sft_rm_ppo_steps
    from alignflow.tasks.orchestration import pipeline
    from alignflow.tasks.orchestration.recipes import load_recipe

    recipe, store, reward = (
        load_recipe("tiny"),
        str(tmp_path / "store"),
        str(REPO / "alignment" / "tiny_world" / "reward.py"),
    )
    sft = {"pretrain": str(REPO / "data"), "max_steps": 1}
    own = {"remote_rm_url": reward, "label_key": "label", "normalize_reward": False}
    planned = pipeline.plan(sft_rm_ppo_steps(recipe, sft, {}, own), recipe, store, "own-reward")
    assert list(planned) == ["sft", "ppo"]
    ppo = planned["ppo"].cfg
    assert (ppo.remote_rm_url, ppo.reward_pretrain, ppo.pretrain) == (reward, None, planned["sft"].model_uri)
    rm = str(REPO / "data")  # a path that exists: the plan checks given inputs
    given_rm = pipeline.plan(sft_rm_ppo_steps(recipe, sft, {}, {"reward_pretrain": rm}), recipe, store, "own-rm")
    assert list(given_rm) == ["sft", "ppo"] and given_rm["ppo"].cfg.reward_pretrain == rm
    with pytest.raises(ConfigError, match=r"rm overrides \(learning_rate\) configure the reward model"):
        sft_rm_ppo_steps(recipe, sft, {"learning_rate": 1e-5}, own)  # no RM stage: they would be ignored
    trained = pipeline.plan(sft_rm_ppo_steps(recipe, sft, {}, {}), recipe, store, "rm")
    assert list(trained) == ["sft", "rm", "ppo"]
    assert trained["rm"].cfg.pretrain == trained["sft"].model_uri == trained["ppo"].cfg.pretrain
    assert trained["ppo"].cfg.reward_pretrain == trained["rm"].model_uri
    assert list(pipeline.plan(sft_rm_ppo_steps(recipe, {}, {}, {}), recipe, store, "b")) == [
        "tiny_base",
        "sft",
        "rm",
        "ppo",
    ]


def test_flow_parameters_name_a_recipe_and_no_config_files():
    from alignflow.flows.sft_dpo import sft_dpo_flow
    from alignflow.flows.sft_rm_ppo import sft_rm_ppo_flow

    for flow in (sft_rm_ppo_flow, sft_dpo_flow):
        props = flow.parameters.model_dump()["properties"]
        assert "recipe" in props and not [p for p in props if p.endswith("_config_file")]
        assert props["recipe"]["default"] is None


@pytest.mark.integration
def test_a_run_with_its_own_model_and_data_and_no_recipe_inherits_no_tiny_value(ray_head, tiny_base, tmp_path):
    """Own `pretrain` and `dataset`, no recipe: every other field of the committed stage's config is
    the schema's default (the tiny recipe sets lr 2e-3, max_len 64, 1200 steps ... none of which may
    show), and the run's `configs` artifact shows that merged config."""
    from prefect.client.orchestration import get_client

    from alignflow.flows.sft import sft_flow

    given = {
        "pretrain": str(tiny_base),
        "dataset": f"json@{REPO / 'data' / 'tiny' / 'sft'}",
        "input_key": "context_messages",
        "apply_chat_template": True,
        "multiturn": True,
        "max_steps": 2,
        "train_batch_size": 8,
        "micro_train_batch_size": 8,
    }
    state = asyncio.run(
        sft_flow(run_name="own-run", store=str(tmp_path / "store"), ray_address=ray_head, sft=given, return_state=True)
    )
    result = state.result()
    config = storage.read_manifest(result["model_uri"])["metadata"]["config"]
    set_by_flow = {
        "save_path",
        "ckpt_path",
        "load_checkpoint",
        "save_minutes",
        "use_tensorboard",
        "wandb_group",
        "wandb_run_name",
        "use_wandb",
    }
    defaults = {
        f.name: (f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default)
        for f in dataclasses.fields(SFTConfig)
    }
    differ = {
        k: (config[k], defaults[k])
        for k in defaults
        if k not in set(given) | set_by_flow and k in config and config[k] != defaults[k]
    }
    assert not differ, differ
    tiny = json.dumps(storage.read_manifest(result["model_uri"])["metadata"]["config"])
    assert '"learning_rate": 0.002' not in tiny and '"max_len": 64' not in tiny

    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async def artifact():  # by key: the session's API holds other tests' artifacts too, more than one page
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["own-run-configs"]))
            )

    found = asyncio.run(artifact())
    assert found and "no recipe (schema defaults)" in found[-1].data and "max_steps: 2" in found[-1].data
