"""Batch inference: the post-processors on hand-made rows (pure), then the real CLI — best-of-n
generation with the SFT model scored by the rule reward into DPO pairs, scoring of existing
rows, and bad input refused in one line before any model loads."""

from __future__ import annotations

import json

import pytest

from alignment.config.inference import POST_PROCESSOR_NAMES
from alignment.inference.postprocess import (
    POST_PROCESSORS,
    Scored,
    conditional_sft,
    iterative_dpo_pairs,
    rejection_sampling,
)
from alignment.tiny_world.paths import tiny_dir
from tests.conftest import launcher, run_module

ROWS = [
    Scored("p1", "a", 0.1),
    Scored("p2", "x", 1.0),
    Scored("p1", "b", 0.9),
    Scored("p1", "c", 0.9),
    Scored("p2", "y", 1.0),
]


def test_post_processors():
    assert set(POST_PROCESSORS) == set(POST_PROCESSOR_NAMES)
    assert rejection_sampling(ROWS) == [
        {"input": "p1", "output": "b", "reward": 0.9},  # first of the tie
        {"input": "p2", "output": "x", "reward": 1.0},
    ]
    assert rejection_sampling(ROWS, rs_min_reward=1.0) == [{"input": "p2", "output": "x", "reward": 1.0}]
    assert iterative_dpo_pairs(ROWS) == [
        {"prompt": "p1", "chosen": "b", "rejected": "a", "chosen_reward": 0.9, "rejected_reward": 0.1}
    ]  # p2: all equal, no pair
    assert conditional_sft(ROWS[:1], csft_prompt="<rm_score>: {reward:.1f} ") == [
        {"input": "<rm_score>: 0.1 p1", "output": "a", "reward": 0.1}
    ]


def read_output(path) -> list[dict]:
    assert json.loads((path / "MANIFEST.json").read_text())["metadata"]["stage"] == "batch_inference"
    return [json.loads(line) for line in (path / "output.jsonl").read_text().splitlines()]


def test_rounds_take_successive_prompt_slices():
    from alignment.config import BatchInferenceConfig, parse_args
    from alignment.inference.batch import this_round

    rows = [{"i": i} for i in range(10)]
    cfg = lambda *a: parse_args(BatchInferenceConfig, ["--pretrain", "m", "--dataset", "d.jsonl", *a])  # noqa: E731
    assert this_round(rows, cfg()) == rows  # no --rollout_batch_size: all
    assert [r["i"] for r in this_round(rows, cfg("--rollout_batch_size", "4", "--iter", "1"))] == [4, 5, 6, 7]
    # past the end it wraps around: a nightly schedule keeps finding prompts
    assert [r["i"] for r in this_round(rows, cfg("--rollout_batch_size", "4", "--iter", "2"))] == [8, 9, 0, 1]
    assert [r["i"] for r in this_round(rows, cfg("--rollout_batch_size", "40", "--iter", "5"))] == list(range(10))


@pytest.mark.integration
def test_best_of_n_to_dpo_pairs_and_scoring(tiny_sft, tmp_path):
    out = tmp_path / "pairs"
    run_module(
        "alignment.cli.batch_inference",
        [
            "--eval_task",
            "generate",
            "--pretrain",
            str(tiny_sft),
            "--dataset",
            f"json@{tiny_dir() / 'prompts'}",
            "--dataset_split",
            "test",
            "--input_key",
            "context_messages",
            "--apply_chat_template",
            "--label_key",
            "label",
            "--max_samples",
            "24",
            "--best_of_n",
            "4",
            "--max_new_tokens",
            "16",
            "--temperature",
            "1.0",
            "--remote_rm_url",
            "alignment/tiny_world/reward.py",
            "--post_processor",
            "iter_dpo",
            "--output_path",
            str(out),
        ],
    )
    pairs = read_output(out)
    assert 0 < len(pairs) <= 24  # prompts whose 4 samples were all right (or all wrong) give no pair
    assert all(p["chosen_reward"] == 1.0 and p["rejected_reward"] == 0.0 for p in pairs)
    assert all(
        p["prompt"].startswith("<|user|>") and p["chosen"] != p["rejected"] for p in pairs
    )  # chat template applied

    data = tmp_path / "scored.jsonl"
    data.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in [
                {"q": "What is 2 + 3?", "a": "2 + 3 = 5", "label": "5"},
                {"q": "What is 2 + 3?", "a": "2 + 3 = 6", "label": "5"},
                {"q": "What is 1 + 1?", "a": "1 + 1 = 2", "label": "2"},
            ]
        )
    )
    score = [
        "--eval_task",
        "rm",
        "--pretrain",
        str(tiny_sft),
        "--dataset",
        str(data),
        "--input_key",
        "q",
        "--output_key",
        "a",
        "--label_key",
        "label",
        "--remote_rm_url",
        "alignment/tiny_world/reward.py",
    ]
    run_module("alignment.cli.batch_inference", [*score, "--output_path", str(tmp_path / "scored")])
    assert [r["reward"] for r in read_output(tmp_path / "scored")] == [1.0, 0.0, 1.0]
    # data parallel: two ranks score their share each, rank 0 writes every row in the input's order
    run_module(
        "alignment.cli.batch_inference", [*score, "--output_path", str(tmp_path / "scored2")], launcher("torchrun", 2)
    )
    assert read_output(tmp_path / "scored2") == read_output(tmp_path / "scored")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--output_path", "out.jsonl"], "give a directory"),
        (["--eval_task", "rm", "--remote_rm_url", "r.py"], "set --output_key"),
        (["--post_processor", "rs"], "ranks responses by reward"),
        (["--post_processor", "iter_dpo", "--remote_rm_url", "r.py"], "use --best_of_n >= 2"),
        (["--csft_prompt", "{score}", "--remote_rm_url", "r.py"], "must format with only {reward}"),
        (["--rs_min_reward", "1", "--remote_rm_url", "r.py"], "filters --post_processor rs, which is not set"),
        (
            ["--enable_csft", "--eval_task", "rm", "--output_key", "o", "--remote_rm_url", "r.py"],
            "--eval_task rm generates nothing",
        ),
    ],
)
def test_bad_flags_one_clear_line(args, needle, tmp_path):
    proc = run_module("alignment.cli.batch_inference", ["--pretrain", "m", "--dataset", "d.jsonl", *args], check=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 2 and len(errors) == 1 and needle in errors[0], proc.stderr[-1500:]


@pytest.mark.integration
@pytest.mark.parametrize("cli", ["batch_inference", "train_sft"])
def test_nan_weights_in_the_input_model_are_one_line(tiny_base, tmp_path, cli):
    """A model folder with a NaN weight (no MANIFEST.json: saved by another tool) is named as damaged when it
    loads (alignment/models/integrity.py::check_finite), before generation or training: batch_inference failed
    in torch.multinomial ("probability tensor contains either inf, nan") and train_sft said "lower
    --learning_rate", which no learning rate fixes."""
    import shutil
    import subprocess
    import sys

    from safetensors.torch import load_file, save_file

    from tests.conftest import python_env

    damaged = tmp_path / "damaged"
    shutil.copytree(tiny_base, damaged)
    (damaged / "MANIFEST.json").unlink(missing_ok=True)
    weights = load_file(damaged / "model.safetensors")
    name = sorted(weights)[len(weights) // 2]
    weights[name].view(-1)[0] = float("nan")
    save_file(weights, damaged / "model.safetensors", metadata={"format": "pt"})
    data = str(tiny_dir() / ("prompts" if cli == "batch_inference" else "sft") / "train.jsonl")
    args = ["--pretrain", str(damaged), "--dataset", data, "--input_key", "input", "--max_samples", "8"]
    if cli == "batch_inference":
        args += ["--output_path", str(tmp_path / "gen")]
    else:
        args += ["--output_key", "output", "--save_path", str(tmp_path / "sft"), "--max_len", "64"]
        args += ["--train_batch_size", "8", "--micro_train_batch_size", "8"]
    run = subprocess.run(
        [sys.executable, "-m", f"alignment.cli.{cli}", *args],
        cwd=tmp_path,
        env=python_env(OMP_NUM_THREADS="2"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    last = [ln for ln in run.stderr.splitlines() if ln.strip()][-1]
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert last == (
        f"error: --pretrain {damaged}: weight {name} holds NaN/Inf; the model is damaged: re-save or re-download "
        f"it, or pass another model (one trained into NaN: its last finite checkpoint)"
    )
    assert not (tmp_path / "gen").exists() and not (tmp_path / "sft").exists()
