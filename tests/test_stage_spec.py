"""The orchestrator's pure parts: stage identity, config building, store URIs; torch-free layers."""

import re
import subprocess
import sys

import pytest

from alignflow.tasks.orchestration.stage_spec import build_config, check_store, identity_hash, job_config, stage_dir
from alignment.config import ConfigError
from tests.conftest import REPO

TINY = str(REPO / "deployments" / "recipes" / "tiny" / "sft.yaml")


def cfg(**over):
    return build_config("sft", TINY, {"pretrain": str(REPO / "data"), **over})  # any existing folder


def test_identity_ignores_bookkeeping_but_not_hyperparameters():
    base = identity_hash("sft", cfg())
    assert identity_hash("sft", cfg(logging_steps=7, save_steps=11, wandb_run_name="x")) == base
    assert identity_hash("sft", cfg(learning_rate=1e-4)) != base
    assert identity_hash("sft", cfg(), inputs={"pretrain": "s3://b/x"}) != base


def test_identity_follows_the_hub_revision():
    hub = identity_hash("sft", cfg(pretrain="HuggingFaceTB/SmolLM2-135M-Instruct"))
    pinned = identity_hash("sft", cfg(pretrain="HuggingFaceTB/SmolLM2-135M-Instruct", revision="v1.0"))
    assert (
        len(
            {hub, pinned, identity_hash("sft", cfg(pretrain="HuggingFaceTB/SmolLM2-135M-Instruct", revision="0123abc"))}
        )
        == 3
    )


def test_identity_follows_the_content_of_local_data(tmp_path):
    """Fix a row in my.jsonl and rerun: the stage runs again (same size, same name, new content);
    touching the file without changing it still finds the committed stage."""
    import os

    data = tmp_path / "my.jsonl"
    data.write_text('{"input": "a", "output": "b"}\n')
    base = identity_hash("sft", cfg(dataset=str(data)))
    os.utime(data, (1, 1))
    assert identity_hash("sft", cfg(dataset=str(data))) == base
    data.write_text('{"input": "a", "output": "c"}\n')
    assert identity_hash("sft", cfg(dataset=str(data))) != base
    folder = tmp_path / "dir"
    folder.mkdir()
    (folder / "part-0.jsonl").write_text("{}\n")
    before = identity_hash("sft", cfg(dataset=f"json@{folder}"))
    (folder / "part-1.jsonl").write_text("{}\n")
    assert identity_hash("sft", cfg(dataset=f"json@{folder}")) != before


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
    with pytest.raises(ConfigError, match=r"unknown option 'learning_rte' \(did you mean --learning_rate\?\)"):
        cfg(learning_rte=1)
    with pytest.raises(ConfigError, match="--zero_stage 5 is not one of"):
        cfg(zero_stage=5)


def test_a_recipe_that_checkpoints_plans_with_the_stage_folders_outputs():
    """The recipe's save_steps with the schema's nested ./ckpt, ./ckpt/checkpoints is fine in a flow:
    the job writes into <stage dir>/model and <stage dir>/checkpoints (job_config)."""
    c = cfg(save_steps=5)
    assert (c.save_path, c.ckpt_path) == ("./ckpt", "./ckpt/checkpoints")


def test_flow_parameters_name_a_typo_and_refuse_negative_retries():
    from alignflow.flows.sft import sft_flow
    from alignflow.flows.sft_dpo import sft_dpo_flow
    from alignflow.tasks.orchestration.params import DPOOverrides, KTOOverrides, SFTOverrides, check_parameters

    hints = {"sft": SFTOverrides | None, "retries": int}
    with pytest.raises(ConfigError, match=r"^sft: sft\.max_stepz: unknown option \(did you mean sft\.max_steps\?\)"):
        check_parameters("sft", hints, {"sft": {"max_stepz": 3}})
    with pytest.raises(ConfigError, match=r"^sft: retries=-1: must be >= 0"):
        check_parameters("sft", hints, {"retries": -1})
    check_parameters("sft", hints, {"sft": {"max_steps": 3}, "retries": 0, "store": "runs/x"})
    # a parameter taking either stage's overrides knows the keys of both
    check_parameters(
        "sft_dpo",
        {"preference": DPOOverrides | KTOOverrides | None},
        {"preference": {"desirable_loss_weight": 2.0, "beta": 0.2}},
    )
    # the flows themselves: the checks come before Prefect's schema, for a call and for a deployment's run
    with pytest.raises(ConfigError, match=r"sft\.learning_rte: unknown option \(did you mean sft\.learning_rate"):
        sft_flow.validate_parameters({"sft": {"learning_rte": 1e-5}})
    with pytest.raises(ConfigError, match="retries=-1: must be >= 0"):
        sft_dpo_flow.validate_parameters({"retries": -1})
    assert sft_flow.validate_parameters({"retries": 0})["retries"] == 0


def test_prefect_layer_does_not_import_torch():
    code = "import sys, alignflow.flows.sft, alignflow.tasks.orchestration.stage; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_the_llama3_8b_template_is_a_valid_multi_gpu_recipe():
    """The commented llama3-8b deployment, uncommented: its stage configs validate, SFT and RM place 16
    GPU ranks (2 x 8) that fit a 2-node x 8-GPU cluster and are refused on one node."""
    import yaml

    from alignflow.tasks.orchestration.stage_spec import shipped
    from alignment.distributed import ray_ranks

    text = shipped("deployments", "prefect.yaml").read_text()
    block = text[text.index("  # - name: llama3-8b") :]
    deployment = yaml.safe_load("\n".join(line.replace("  # ", "  ", 1) for line in block.splitlines()))[0]
    from alignflow.tasks.orchestration import pipeline
    from alignflow.tasks.orchestration.pipeline import Output, Step
    from alignflow.tasks.orchestration.recipes import load_recipe

    params = deployment["parameters"]
    planned = pipeline.plan(
        [
            Step("sft", "sft", "sft"),
            Step("rm", "rm", "rm", {}, {"pretrain": Output("sft")}),
            Step("ppo", "ppo", "ppo", {}, {"pretrain": Output("sft"), "reward_pretrain": Output("rm")}),
        ],
        load_recipe(params["recipe"]),
        "s3://bucket/runs",
        "llama",
    )
    for stage, p in planned.items():
        cfg = p.cfg
        if stage == "ppo":
            assert cfg.actor_num_gpus_per_node == 8 and cfg.vllm_num_engines == 4
            continue
        assert (cfg.num_nodes, cfg.num_gpus_per_node, cfg.zero_stage, cfg.bf16) == (2, 8, 3, True)
        assert ray_ranks.check_resources(cfg, {"CPU": 192.0, "GPU": 16.0})[0]
        with pytest.raises(ConfigError, match="16 ranks need 16 GPU"):
            ray_ranks.check_resources(cfg, {"CPU": 96.0, "GPU": 8.0})
    assert deployment["work_pool"]["job_variables"]["env"]["ALIGNFLOW_JOB_ENV"]


@pytest.mark.parametrize(
    "over, needle",
    [
        ({"packing_samples": "maybe"}, "--packing_samples 'maybe': expected true or false"),
        ({"dataset": "/nowhere/x.jsonl"}, "--dataset /nowhere/x.jsonl: does not exist"),
        ({"dataset": "xml@/tmp"}, "NAME is a file format (json, jsonl, parquet, csv, arrow) or a hub dataset name"),
        ({"eval_dataset": "not a name!"}, "neither an existing path nor a hub name"),
        ({"pretrain": "/nowhere/model"}, "--pretrain /nowhere/model: does not exist"),
        (
            {"revision": "v1.0"},
            "--revision v1.0: --pretrain " + str(REPO / "data") + " is a directory or store URI",
        ),
    ],
)
def test_a_flow_refuses_bad_stage_values_before_anything_starts(over, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        cfg(**over)


def test_flow_values_true_false_strings_become_bools():
    assert cfg(packing_samples="false").packing_samples is False and cfg(packing_samples="true").packing_samples is True
    assert cfg(dataset="HuggingFaceH4/ultrachat_200k").dataset == "HuggingFaceH4/ultrachat_200k"  # a hub name


def test_flow_parameters_are_typed_per_stage():
    """Prefect's parameter schema (what `prefect deployment inspect` and the UI show) has each stage's
    fields with their help, default and choices; an unknown key is one line before any flow run exists."""
    import asyncio

    from alignflow.flows.sft import sft_flow
    from alignflow.flows.sft_rm_ppo import sft_rm_ppo_flow

    schema = sft_rm_ppo_flow.parameters.model_dump()
    ppo = schema["definitions"]["PPOOverrides"]["properties"]
    from alignment.config.algorithm import ADVANTAGE_ESTIMATORS

    assert ppo["advantage_estimator"]["description"].endswith("(default: 'gae')")  # the schema's own default
    assert {"enum": list(ADVANTAGE_ESTIMATORS), "type": "string"} in ppo["advantage_estimator"]["anyOf"]
    assert (
        "packing_samples" in ppo
        and "Peak learning rate" in schema["definitions"]["SFTOverrides"]["properties"]["learning_rate"]["description"]
    )
    with pytest.raises(ConfigError, match="max_stepz"):
        asyncio.run(sft_flow(sft={"max_stepz": 3}))


def test_the_library_never_imports_its_entry_points():
    """alignment/ (what runs inside Ray jobs) does not import alignment.cli: the CLIs sit on top."""
    import re as _re

    offenders = [
        str(p.relative_to(REPO))
        for p in (REPO / "alignment").rglob("*.py")
        if "cli" not in p.relative_to(REPO / "alignment").parts[:1]
        and _re.search(r"^\s*(from alignment\.cli|import alignment\.cli)", p.read_text(), _re.M)
    ]
    assert not offenders, offenders


def test_settings_the_flow_makes_are_refused_as_parameters():
    """Where a stage writes and the upstream models the flow feeds it would be silently replaced: one line each."""
    from alignflow.flows.sft_dpo import sft_dpo_flow  # noqa: F401  (flow_sets' callers import cleanly)
    from alignflow.tasks.orchestration import pipeline
    from alignflow.tasks.orchestration.pipeline import Output, Step, flow_sets
    from alignflow.tasks.orchestration.recipes import load_recipe

    recipe = load_recipe("tiny")
    for over, needle in [
        ({"save_path": "/tmp/mine"}, "sft: save_path='/tmp/mine' is set by the flow (where it commits: "),
        ({"ckpt_path": "/tmp/ck"}, "sft: ckpt_path='/tmp/ck' is set by the flow (its checkpoints"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(needle)):
            pipeline.plan([Step("sft", "sft", "sft", {"pretrain": "org/base", **over})], recipe, "/tmp/store", "r")
    sft = Step("sft", "sft", "sft", {"pretrain": "org/base"})
    steps = [sft, Step("dpo", "dpo", "dpo", {"pretrain": "org/other"}, {"pretrain": Output("sft")})]
    with pytest.raises(ConfigError, match=re.escape("dpo: pretrain='org/other' is set by the flow (the 'sft' stage's")):
        pipeline.plan(steps, recipe, "/tmp/store", "r")
    with pytest.raises(ConfigError, match=re.escape("generate: pretrain='x' is set by the flow (pretrain='policy')")):
        flow_sets("generate", {"pretrain": "x"}, pretrain="policy")
    assert flow_sets("generate", {"pretrain": "policy", "seed": 1}, pretrain="policy") == {
        "pretrain": "policy",
        "seed": 1,
    }
