"""Model cards and lineage: a short SFT from a committed tiny base, then a short DPO from it, through
the real CLIs (a wandb key on the SFT's command line); their cards parse with huggingface_hub, say
where the model came from, are covered by the manifest and hold no secret; the lineage CLI walks
DPO -> SFT -> base."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

from alignment.fingerprint import fingerprint
from alignment.tiny_world.paths import tiny_dir
from tests.conftest import run_module

pytestmark = pytest.mark.integration

FAKE_WANDB_KEY = "alignflow-fake-wandb-key-5Rt9Qz0123456789abcdef"
SHORT = [
    "--apply_chat_template",
    "--max_len",
    "64",
    "--packing_samples",
    "--train_batch_size",
    "8",
    "--micro_train_batch_size",
    "8",
    "--max_steps",
    "2",
    "--max_samples",
    "64",
    "--save_steps",
    "-1",
    "--logging_steps",
    "1",
    "--eval_steps",
    "-1",
]


@pytest.fixture(scope="module")
def chain(module_tmp) -> dict[str, Path]:
    from alignment.tiny_world.base_model import make_base_committed

    root = module_tmp
    base, sft, dpo = root / "base", root / "sft", root / "dpo"
    make_base_committed(str(base))
    sft_data = f"json@{tiny_dir() / 'sft'}"
    run_module(
        "alignment.cli.train_sft",
        [
            "--pretrain",
            str(base),
            "--save_path",
            str(sft),
            "--dataset",
            sft_data,
            "--eval_dataset",
            sft_data,
            "--input_key",
            "context_messages",
            "--multiturn",
            *SHORT,
            "--use_wandb",
            FAKE_WANDB_KEY,
        ],
        # what a flow sets for its stage job: the offline wandb run is kept in the stage's folder, beside the model
        env={"WANDB_MODE": "offline", "WANDB_DIR": str(root), "ALIGNFLOW_TRACKING_URI": str(root / "sft-stage")},
    )
    pairs = f"json@{tiny_dir() / 'preference'}"
    run_module(
        "alignment.cli.train_dpo",
        [
            "--pretrain",
            str(sft),
            "--save_path",
            str(dpo),
            "--dataset",
            pairs,
            "--eval_dataset",
            pairs,
            "--prompt_key",
            "prompt",
            *SHORT,
        ],
    )
    return {"base": base, "sft": sft, "dpo": dpo}


def alignflow_facts(model: Path) -> tuple[ModelCard, dict]:
    card = ModelCard.load(model / "README.md")
    return card, card.data.to_dict()["alignflow"]


def test_cards_say_where_each_model_came_from(chain):
    for stage, parent, data in (
        ("sft", chain["base"], tiny_dir() / "sft"),
        ("dpo", chain["sft"], tiny_dir() / "preference"),
    ):
        card, facts = alignflow_facts(chain[stage])
        assert facts["stage"] == stage and facts["parents"] == {"pretrain": str(parent)}
        assert card.data.base_model == facts["base_model"] == str(chain["base"])  # the chain's first model
        assert facts["data_fingerprints"]["dataset"] == fingerprint(str(data)) != {}
        assert card.data.datasets == [f"json@{data}"]
        assert facts["code_version"] and facts["wall_time_s"] > 0
        config = card.text.split("```yaml", 1)[1]
        assert f"pretrain: {parent}" in config and f"save_path: {chain[stage]}" in config
        assert "README.md" in json.loads((chain[stage] / "MANIFEST.json").read_text())["files"]  # committed
    card, facts = alignflow_facts(chain["dpo"])
    assert "beta: 0.1" in card.text and 0.0 <= facts["final_metrics"]["eval/reward_acc"] <= 1.0
    results = {r.metric_type: r.metric_value for r in card.data.eval_results}
    assert results["reward_acc"] == facts["final_metrics"]["eval/reward_acc"]  # the hub's evaluation results


def test_no_committed_file_holds_the_wandb_key(chain):
    files = [p for model in ("sft", "dpo") for p in chain[model].rglob("*") if p.is_file()]
    assert len(files) > 10
    assert not [p for p in files if FAKE_WANDB_KEY.encode() in p.read_bytes()]
    text = ModelCard.load(chain["sft"] / "README.md").text
    assert "use_wandb: '***'" in text and "- wandb: `" in text  # wandb did log (offline); the field is masked


def test_an_offline_wandb_run_is_kept_where_the_card_says(chain):
    """A flow stage's offline wandb run lives in its job's temp dir, deleted with an embedded Ray head: it is
    committed into the stage's folder (ALIGNFLOW_TRACKING_URI), and the model's card names that copy."""
    from alignment import storage

    kept = storage.read_manifest(chain["sft"])["metadata"]["tracking"]["wandb"]
    stage = chain["sft"].parent / "sft-stage" / "wandb"
    assert kept.startswith(f"{stage}/offline-run-") and storage.is_committed(kept), kept
    assert any(Path(kept).rglob("*.wandb")) and f"`{kept}`" in ModelCard.load(chain["sft"] / "README.md").text
    assert not [p for p in Path(kept).rglob("*") if p.is_file() and FAKE_WANDB_KEY.encode() in p.read_bytes()]


def test_lineage_cli_walks_dpo_sft_base(chain):
    proc = run_module("alignment.cli.lineage", [str(chain["dpo"])])
    lines = proc.stdout.strip().splitlines()
    assert [ln.split()[:2] for ln in lines] == [
        ["dpo", str(chain["dpo"])],
        ["sft", str(chain["sft"])],
        ["tiny_base", str(chain["base"])],
    ]
    assert "reward accuracy" in lines[0] and "eval loss" in lines[1] and lines[2].endswith("random init")
    hops = json.loads(run_module("alignment.cli.lineage", [f"file://{chain['dpo']}", "--json"]).stdout)
    assert [h["stage"] for h in hops] == ["dpo", "sft", "tiny_base"]
    assert hops[0]["parent"] == str(chain["sft"]) and hops[1]["parents"] == {"pretrain": str(chain["base"])}
    assert hops[2]["card"] is False and hops[0]["base_model"] == str(chain["base"])


def test_flow_report_shows_the_final_models_lineage(chain):
    from alignflow.tasks.presentation.report import PipelineReport, StageLine, final_lineage

    stages = [
        StageLine("sft", "sft", 1.0, None, False, "", str(chain["sft"])),
        StageLine("dpo", "dpo", 1.0, None, False, "", str(chain["dpo"])),
    ]
    report = PipelineReport("sft-dpo", "run", stages, 2.0, lineage=final_lineage(stages))
    assert len(report.lineage) == 3 and str(chain["base"]) in report.lineage[-1]
    assert "Lineage of the final model" in report.markdown({}) and report.lineage[0] in report.text()


def test_lineage_of_nothing_is_one_line_error(tmp_path):
    proc = run_module("alignment.cli.lineage", [str(tmp_path / "missing")], check=False)
    assert proc.returncode == 2 and "no model there" in proc.stderr


def test_a_stage_that_logged_no_figure_says_so_and_never_nan():
    """A DPO round shorter than its --logging_steps logs no loss: the report said "loss nan", which reads
    as a run that diverged."""
    from alignment.lineage import key_metric

    assert key_metric("dpo", {}) == "loss: none logged"
    assert key_metric("dpo", {"train/loss": 0.5}) == "loss 0.500"
    assert key_metric("dpo", {"train/reward_acc": 0.75, "train/loss": 0.5}) == "reward accuracy 75.0%"
    assert key_metric("sft", {"train/loss": 0.25}) == "loss 0.250"  # a training loss is not called "eval loss"
    assert key_metric("sft", {"eval/loss": 0.3, "train/loss": 0.25}) == "eval loss 0.300"
    assert key_metric("ppo", {}) == "sampled reward: none logged (last iteration)"
