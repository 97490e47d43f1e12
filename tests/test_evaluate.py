"""The `evaluate` stage's CLI on the tiny world: its generative accuracy is the tiny world's own held-out
check, SFT lowers perplexity against the random-init base, a reward model's pair accuracy is a share, and
the reduction of per-row values to metrics is the same for one rank or many (pure math)."""

from __future__ import annotations

import json
import math

import pytest

from alignment.inference.evaluate import RowValue, label_match, reduce
from alignment.tiny_world.paths import tiny_dir
from tests.conftest import run_module

T = str(tiny_dir())


def test_reduce_is_the_mean_over_rows_and_tokens():
    rows = [RowValue(0, {"nll_sum": 2.0, "tokens": 1.0}, {}), RowValue(1, {"nll_sum": 1.0, "tokens": 2.0}, {})]
    assert reduce("perplexity", rows) == {"perplexity": pytest.approx(math.exp(1.0)), "nll": 1.0, "rows": 2.0}
    pairs = [RowValue(i, {"margin": m, "right": float(m > 0)}, {}) for i, m in enumerate((0.5, -0.25, 1.0, 0.75))]
    assert reduce("pairs", pairs) == {"pair_accuracy": 0.75, "mean_margin": 0.5, "rows": 4.0}


def test_a_label_matches_the_last_word_only():
    assert label_match("27 + 0 = 27", "27") and label_match("The answer is 42.", 42)
    assert not label_match("27 + 100 = 127", "27") and not label_match("", "27") and not label_match("27 is it", "27")


def evaluate(model, out, *args: str) -> dict:
    run_module("alignment.cli.evaluate", ["--pretrain", str(model), "--output_path", str(out), *args])
    saved = json.loads((out / "evaluation.json").read_text())
    assert (out / "MANIFEST.json").exists() and len(saved["examples"]) == min(8, saved["n"])
    return saved["metrics"]


@pytest.mark.integration
def test_evaluate_measures_what_the_tiny_world_measures(tiny_sft, tiny_base, tmp_path):
    from alignment.tiny_world.evaluate import greedy_accuracy

    generated = evaluate(
        tiny_sft,
        tmp_path / "gen",
        "--dataset",
        f"json@{T}/prompts",
        "--dataset_split",
        "test",
        "--input_key",
        "context_messages",
        "--apply_chat_template",
        "--label_key",
        "label",
        "--remote_rm_url",
        f"{T}/reward_func.py",
        "--max_new_tokens",
        "16",
        "--max_samples",
        "100",
    )
    assert generated["accuracy"] == greedy_accuracy(tiny_sft, limit=100).accuracy and generated["rows"] == 100
    matched = evaluate(
        tiny_sft,
        tmp_path / "match",
        "--dataset",
        f"json@{T}/prompts",
        "--dataset_split",
        "test",
        "--input_key",
        "context_messages",
        "--apply_chat_template",
        "--label_key",
        "label",
        "--max_new_tokens",
        "16",
        "--max_samples",
        "100",
    )
    assert matched["accuracy"] == generated["accuracy"]  # the tiny world's rule is the last word too
    sft = [
        "--eval_task",
        "perplexity",
        "--dataset",
        f"json@{T}/sft",
        "--dataset_split",
        "test",
        "--input_key",
        "input",
        "--output_key",
        "output",
        "--apply_chat_template",
        "--max_samples",
        "50",
    ]
    assert (
        evaluate(tiny_sft, tmp_path / "ppl", *sft)["perplexity"]
        < evaluate(tiny_base, tmp_path / "ppl0", *sft)["perplexity"]
    )
    pairs = evaluate(
        tiny_sft,
        tmp_path / "pairs",
        "--eval_task",
        "pairs",
        "--dataset",
        f"json@{T}/preference",
        "--dataset_split",
        "test",
        "--prompt_key",
        "prompt",
        "--apply_chat_template",
        "--max_samples",
        "50",
    )
    assert 0.0 <= pairs["pair_accuracy"] <= 1.0 and pairs["rows"] == 50


def test_the_flows_metric_parameter_names_exactly_what_evaluate_commits():
    import typing

    from alignflow.tasks.orchestration.params import MetricName
    from alignment.config.evaluate import EVAL_METRICS, HIGHER_IS_BETTER

    committed = {m for metrics in EVAL_METRICS.values() for m in metrics}
    assert set(typing.get_args(MetricName)) == committed == set(HIGHER_IS_BETTER)


def test_a_conditional_sft_model_is_evaluated_asking_for_a_score(tiny_base):
    """--enable_csft puts the asked-for score where the csft post-processor put each row's own: before the
    rendered prompt, so a conditional-SFT model is measured as it was trained; without it, no prefix."""
    from transformers import AutoTokenizer

    from alignment.config import parse_args
    from alignment.config.evaluate import EvaluateConfig
    from alignment.inference.eval_rows import load_eval_rows
    from alignment.inference.postprocess import Scored, conditional_sft

    tok = AutoTokenizer.from_pretrained(tiny_base)
    data = ["--dataset", f"json@{T}/prompts", "--dataset_split", "test", "--input_key", "context_messages"]
    common = [
        "--pretrain",
        str(tiny_base),
        *data,
        "--apply_chat_template",
        "--label_key",
        "label",
        "--max_samples",
        "3",
    ]
    plain = load_eval_rows(parse_args(EvaluateConfig, common), tok)
    asked = load_eval_rows(parse_args(EvaluateConfig, [*common, "--enable_csft", "--csft_reward", "0.0"]), tok)
    (trained,) = conditional_sft([Scored(plain[0].prompt, " 7", 0.0)])
    assert [r.prompt for r in asked] == ["<rm_score>: 0.0 " + r.prompt for r in plain]
    assert asked[0].prompt == trained["input"] and asked[0].question == plain[0].question
