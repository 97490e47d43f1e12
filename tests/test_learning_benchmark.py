"""benchmarks/learning.py at a tiny budget, two methods (an offline one and an RL one with the rule reward), one
seed, on the session's Ray head and Prefect API: it writes the page, the JSON and the chart; run again, it
trains nothing (every stage committed) and keeps the wall times of the run that trained them. What the methods
reach at the shipped budgets is the benchmark's to measure (docs/learning.md), not this test's. Also, without a
cluster: the page rewritten from the JSON alone, and the rows it keeps. How each method's stages are planned:
tests/test_learning_benchmark_plans.py."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.benchmark_modules import load_benchmark
from tests.conftest import REPO
from tests.flow_runs import ray_jobs

pytestmark = pytest.mark.integration

BUDGET = {
    "dpo": {"max_steps": 2, "train_batch_size": 8, "micro_train_batch_size": 8, "eval_dataset": None},
    "ppo": {
        "max_samples": 16,
        "num_episodes": 1,
        "dynamic_filtering": False,  # the recipe's dynamic sampling is its learning budget, not this test's
        "n_samples_per_prompt": 2,
        "rollout_batch_size": 8,
        "micro_rollout_batch_size": 8,
        "train_batch_size": 16,
        "micro_train_batch_size": 8,
    },
    "evaluate": {"max_samples": 16},
}


@pytest.mark.demo  # a benchmark is run by hand, as tests/test_benchmarks.py's are (`make test-demo`): 3-5 min of CI
def test_two_methods_write_the_page_and_the_json_and_a_rerun_trains_nothing(ray_head, tiny_sft, tmp_path):
    learning = load_benchmark()
    out, js, chart = tmp_path / "learning.md", tmp_path / "learning.json", tmp_path / "img" / "learning.png"
    argv = [
        str(tiny_sft),
        "--methods",
        "dpo,grpo-rule",
        "--seeds",
        "7",
        "--budget",
        json.dumps(BUDGET),
        "--store",
        str(tmp_path / "store"),
        "--ray_address",
        ray_head,
        "--out",
        str(out),
        "--json",
        str(js),
        "--chart",
        str(chart),
    ]
    assert learning.main(argv) == 0
    first = json.loads(js.read_text())
    assert set(first["methods"]) == {"dpo", "grpo-rule"} and 0 <= first["sft_accuracy"] <= 1
    for row in first["methods"].values():
        (run,) = row["runs"]
        assert run["seed"] == 7 and 0 <= run["accuracy"] <= 1 and run["wall_s"] > 0
        assert row["gain"] == pytest.approx(row["mean"] - first["sft_accuracy"]) and row["spread"] == 0
    page = out.read_text()
    assert "| dpo | offline (preference data) |" in page and "| grpo-rule | rule |" in page
    assert "![held-out accuracy by method](img/learning.png)" in page and chart.stat().st_size > 1000
    assert page.index("## What moved the numbers") > page.index("| grpo-rule |")  # benchmarks/learning_notes.md
    jobs = len(ray_jobs(ray_head, "learning"))
    assert jobs == 5, jobs  # the SFT start's evaluation, then per method its stage and its evaluation

    assert learning.main(argv) == 0  # resumes: everything is committed
    again = json.loads(js.read_text())
    assert len(ray_jobs(ray_head, "learning")) == jobs  # no job submitted
    for m in ("dpo", "grpo-rule"):
        assert again["methods"][m]["runs"] == first["methods"][m]["runs"]  # accuracy, wall time and model kept
    # into a JSON that never saw these runs: the skipped stages' wall times are those recorded beside their models
    fresh_json = tmp_path / "fresh.json"
    fresh_argv = [*argv[:-6], "--out", str(tmp_path / "fresh.md"), "--json", str(fresh_json), "--chart", str(chart)]
    assert learning.main(fresh_argv) == 0
    fresh = json.loads(fresh_json.read_text())
    for m in ("dpo", "grpo-rule"):
        assert fresh["methods"][m]["runs"][0]["wall_s"] == pytest.approx(
            first["methods"][m]["runs"][0]["wall_s"], abs=0.2
        )
    assert len(ray_jobs(ray_head, "learning")) == jobs
    # one method measured again on its own: the other stays on the page, with the run that measured it
    assert learning.main([*argv[:2], "dpo", *argv[3:]]) == 0
    alone = json.loads(js.read_text())
    assert alone["methods"]["grpo-rule"] == again["methods"]["grpo-rule"] and "dpo,grpo-rule" in out.read_text()
    assert learning.main([*argv[:2], "no-such-method", *argv[3:]]) == 2
    # new notes under the same figures: the page is rewritten from the JSON, nothing runs
    (tmp_path / "notes.md").write_text("## What moved the numbers\n\nnothing yet\n")
    page_only = ["--page_only", "--out", str(out), "--json", str(js), "--chart", str(chart)]
    assert learning.main([*page_only, "--notes", str(tmp_path / "notes.md")]) == 0
    assert out.read_text().endswith("nothing yet\n") and "| grpo-rule | rule |" in out.read_text()
    assert len(ray_jobs(ray_head, "learning")) == jobs


def test_page_only_needs_the_json_and_a_run_needs_the_sft_start(tmp_path, capsys):
    learning = load_benchmark()
    assert learning.main(["--page_only", "--json", str(tmp_path / "none.json")]) == 2
    assert "does not exist; run the benchmark first" in capsys.readouterr().err
    (tmp_path / "l.json").write_text('{"recipe": "no-such-recipe"}')
    assert learning.main(["--page_only", "--json", str(tmp_path / "l.json")]) == 2
    assert "l.json: its recipe: " in capsys.readouterr().err
    assert learning.main(["--recipe", "smollm2", "--methods", "grpo-rule"]) == 2  # only tiny's start is shipped
    assert "--recipe smollm2: give the SFT model" in capsys.readouterr().err
    assert learning.main([str(tmp_path), "--methods", "dpo"]) == 2  # a folder no stage committed
    assert "not a committed model (no MANIFEST.json)" in capsys.readouterr().err


def test_the_page_is_measured_from_the_shipped_start():
    """The tiny page's rows come from benchmarks/tiny_sft (the default start), whose files match their manifest:
    a run from anywhere else (a start retrained on this machine) would have dropped them."""
    from alignment.models.integrity import check_model_dir

    learning = load_benchmark()
    check_model_dir(learning.SHIPPED_START, "benchmarks/tiny_sft")  # raises on a file that is not the committed one
    page = json.loads((REPO / "benchmarks" / "results" / "learning.json").read_text())
    assert page["sft_weights"] == learning.weights_digest(learning.SHIPPED_START)


def test_rows_are_kept_only_from_the_same_sft_weights(tmp_path):
    """An SFT start retrained at the same path (on another machine, say) is another start: the earlier rows go,
    whatever its accuracy; the same weights keep them (with the same recipe files). Only the weights count, not
    the manifest's other files."""
    from alignflow.tasks.orchestration.recipes import load_recipe

    learning = load_benchmark()

    def model(name: str, weights_sha: str, readme: str) -> str:
        files = {"model.safetensors": {"size": 1, "sha256": weights_sha}, "README.md": {"size": 1, "sha256": readme}}
        (tmp_path / name).mkdir()
        (tmp_path / name / "MANIFEST.json").write_text(json.dumps({"files": files}))
        return str(tmp_path / name)

    first, same, retrained = model("a", "w1", "r1"), model("b", "w1", "r2"), model("c", "w2", "r1")
    tiny = load_recipe("tiny")
    digests = {m: learning.recipe_digest(tiny, m) for m in ("dpo", "grpo-rm")}
    rows = {m: {"runs": [], "recipe_digest": digests[m]} for m in digests}
    previous = {"sft_weights": learning.weights_digest(first), "methods": rows}
    now = {"recipe": "tiny", "methods": {}}
    assert learning.kept(previous, {**now, "sft_weights": learning.weights_digest(same)}, digests) == rows
    assert learning.kept(previous, {**now, "sft_weights": learning.weights_digest(retrained)}, digests) == {}
    # the same start measured with another recipe's files: another benchmark (its own --json)
    smollm2 = {**now, "recipe": "smollm2", "sft_weights": previous["sft_weights"]}
    assert learning.kept(previous, smollm2, digests) == {}
    # a file a row's stages read changed since it was measured (the RM rows read rm.yaml and ppo.yaml): it goes
    edited = tmp_path / "edited"
    shutil.copytree(tiny.folder, edited)
    (edited / "rm.yaml").write_text((edited / "rm.yaml").read_text() + "max_epochs: 5\n")
    now_digests = {m: learning.recipe_digest(load_recipe(str(edited)), m) for m in digests}
    assert now_digests["dpo"] == digests["dpo"] and now_digests["grpo-rm"] != digests["grpo-rm"]
    same_start = {**now, "sft_weights": previous["sft_weights"]}
    assert learning.kept(previous, same_start, now_digests) == {"dpo": rows["dpo"]}
    # a row that records no digest (measured before rows had one) goes too, even for a method the recipe lacks
    assert learning.kept({**previous, "methods": {"kd": {"runs": []}}}, same_start, {"kd": None}) == {}


def test_page_only_after_a_recipe_edit_marks_the_rows_it_made_stale(tmp_path):
    """`--page_only` after rm.yaml changed: the RM row stays on the page (its run has not been replaced yet)
    but is marked as the earlier recipe's; the DPO row, whose files did not change, is not."""
    from alignflow.tasks.orchestration.recipes import load_recipe

    learning = load_benchmark()
    tiny = load_recipe("tiny")
    row = {"reward": "r", "runs": [{"seed": 42}], "mean": 0.8, "spread": 0.0, "gain": 0.1, "wall_s": 1.0}
    row["measured"] = {"how": "x", "date": "d"}
    methods = {m: {**row, "recipe_digest": learning.recipe_digest(tiny, m)} for m in ("dpo", "grpo-rm")}
    edited = tmp_path / "edited"
    shutil.copytree(tiny.folder, edited)
    (edited / "rm.yaml").write_text((edited / "rm.yaml").read_text() + "max_epochs: 5\n")
    files = ["--json", str(tmp_path / "l.json"), "--out", str(tmp_path / "p.md"), "--chart", str(tmp_path / "c.png")]
    for recipe, marked in (("tiny", False), (str(edited), True)):  # the JSON names the recipe it measured
        (tmp_path / "l.json").write_text(json.dumps({"recipe": recipe, "sft_accuracy": 0.7, "methods": methods}))
        assert learning.main(["--page_only", "--notes", "", *files]) == 0
        page = (tmp_path / "p.md").read_text()
        assert page.count("| grpo-rm † |") == int(marked) and "| dpo |" in page, page
        assert ("the next run of the method replaces the row" in page) == marked
