"""Dataset mixing (--dataset_probs, --prompt_data_probs) by `datasets.interleave_datasets`, as
OpenRLHF's blending_datasets: the drawn proportions match the probabilities (training data and RL
prompts), a seed gives one order, --max_samples takes the first rows, one dataset is read as is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alignment.config import ConfigError, PPOConfig, SFTConfig, parse_args
from alignment.datasets.mixing import blend, blend_rows
from alignment.tiny_world.paths import tiny_dir

N = 4000  # draws; the binomial standard error of a 0.4 share is sqrt(0.24 / 4000) = 0.008
TOL = 0.03  # ~4 standard errors


def write_rows(path: Path, source: str, n: int) -> str:
    path.write_text(
        "".join(
            json.dumps(
                {
                    "input": f"{source} {i}",
                    "output": "x",
                    "source": source,
                    "context_messages": [{"role": "user", "content": f"{source} {i}"}],
                }
            )
            + "\n"
            for i in range(n)
        )
    )
    return str(path)


@pytest.fixture
def two_sets(tmp_path) -> str:
    # b is smaller than its share of the draws: it wraps around (without replacement within a pass)
    return f"{write_rows(tmp_path / 'a.jsonl', 'a', 3000)},{write_rows(tmp_path / 'b.jsonl', 'b', 1500)}"


def shares(rows: list[dict]) -> dict[str, float]:
    return {s: sum(r["source"] == s for r in rows) / len(rows) for s in ("a", "b")}


@pytest.mark.parametrize("probs, want_a", [("0.4,0.6", 0.4), ("0.9,0.1", 0.9), (None, 0.5)])
def test_blend_proportions(two_sets, probs, want_a):
    rows = blend(two_sets, probs, "train", N, seed=3)
    assert len(rows) == N
    assert abs(shares(rows)["a"] - want_a) < TOL, shares(rows)
    b_rows = [r["input"] for r in rows if r["source"] == "b"][:1500]
    assert len(set(b_rows)) == len(b_rows)  # a full pass over b before any row repeats
    assert b_rows[:3] == ["b 0", "b 1", "b 2"]  # in file order: the trainer's sampler shuffles


def test_blend_is_seed_deterministic(two_sets):
    first = blend_rows(two_sets, "0.4,0.6", "train", 500, seed=3).lines
    assert blend_rows(two_sets, "0.4,0.6", "train", 500, seed=3).lines == first
    assert blend_rows(two_sets, "0.4,0.6", "train", 500, seed=4).lines != first


def test_max_samples_takes_the_first_rows_of_the_mixture(two_sets):
    whole = blend_rows(two_sets, "0.4,0.6", "train", N, seed=3).lines
    assert blend_rows(two_sets, "0.4,0.6", "train", 10, seed=3).lines == whole[:10]
    # "all_exhausted": without a cap every row of both sets is drawn at least once (b several times)
    every = blend(two_sets, "0.4,0.6", "train", 100_000_000, seed=3)
    assert {r["input"] for r in every} == {f"a {i}" for i in range(3000)} | {f"b {i}" for i in range(1500)}


def test_one_dataset_is_its_first_rows_in_file_order(tmp_path):
    one = write_rows(tmp_path / "a.jsonl", "a", 50)
    assert [r["input"] for r in blend(one, None, "train", 20, seed=3)] == [f"a {i}" for i in range(20)]
    assert len(blend(one, None, "train", 10_000, seed=3)) == 50


def test_zero_probability_dataset_is_left_out(two_sets):
    # interleave_datasets refuses p = 0 under "all_exhausted" (it could never exhaust that set)
    rows = blend(two_sets, "1,0", "train", 5000, seed=3)
    assert len(rows) == 3000 and {r["source"] for r in rows} == {"a"}


def test_rows_of_different_shapes_mix(tmp_path):
    """A field that is a string in one dataset and a list of messages in the other, and columns
    only one dataset has: rows travel as JSON text, so no common Arrow schema is needed."""
    a = tmp_path / "a.jsonl"
    a.write_text(json.dumps({"input": "plain", "output": "x"}) + "\n")
    b = tmp_path / "b.jsonl"
    b.write_text(json.dumps({"input": [{"role": "user", "content": "chat"}], "extra": {"k": [1, None]}}) + "\n")
    rows = blend(f"{a},{b}", None, "train", 10, seed=0)
    assert {"input": "plain", "output": "x"} in rows
    assert {"input": [{"role": "user", "content": "chat"}], "extra": {"k": [1, None]}} in rows


def test_sft_and_ppo_flags_mix_the_same_way(two_sets):
    sft = parse_args(
        SFTConfig, ["--pretrain", "m", "--dataset", two_sets, "--dataset_probs", "0.4,0.6", "--max_samples", str(N)]
    )
    assert abs(shares(blend(sft.dataset, sft.dataset_probs, "train", sft.max_samples, sft.seed))["a"] - 0.4) < TOL


def test_prompt_data_probs_mix_rl_prompts(two_sets, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    from alignment.datasets.prompts import load_prompts
    from alignment.datasets.tokenized import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "tokenized"))
    cfg = parse_args(
        PPOConfig,
        [
            "--pretrain",
            "m",
            "--remote_rm_url",
            "r.py",
            "--prompt_data",
            two_sets,
            "--prompt_data_probs",
            "0.4,0.6",
            "--input_key",
            "context_messages",
            "--apply_chat_template",
            "--max_samples",
            str(N),
        ],
    )
    prompts = load_prompts(cfg, AutoTokenizer.from_pretrained(tiny_dir() / "tokenizer"), cfg.prompt_data, "train")
    share_a = sum("\na " in p.text for p in prompts) / len(prompts)
    assert len(prompts) == N and abs(share_a - 0.4) < TOL, share_a


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--prompt_data_probs", "0.5"], "--prompt_data_probs has 1 values for 2 datasets"),
        (["--prompt_data_probs", "x,y"], "--prompt_data_probs 'x,y': use comma-separated numbers"),
        (["--prompt_data_probs", "0,0"], "must be >= 0 and not all 0"),
    ],
)
def test_bad_prompt_data_probs(args, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_args(PPOConfig, ["--pretrain", "m", "--remote_rm_url", "r.py", "--prompt_data", "a.jsonl,b.jsonl", *args])
