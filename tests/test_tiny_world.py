"""The shipped tiny world: deterministic, disjoint splits, tokenizer, reward function."""

import json

import pytest

from alignment.tiny_world.arithmetic import Problem, TaskSpec, make_splits, near_misses
from alignment.tiny_world.build import build
from alignment.tiny_world.paths import tiny_dir
from alignment.tiny_world.reward import extract_answer, reward_func


def test_regenerated_world_equals_shipped(tmp_path):
    out = build(tmp_path / "tiny")
    shipped = tiny_dir()
    for rel in [
        "sft/train.jsonl",
        "preference/test.jsonl",
        "prompts/test.jsonl",
        "rm/train.jsonl",
        "rm/test.jsonl",
        "llama_config.json",
        "tokenizer/tokenizer.json",
    ]:
        assert (out / rel).read_text() == (shipped / rel).read_text(), rel


def test_eval_questions_never_trained_on():
    splits = make_splits(TaskSpec(), seed=0)
    eval_q = {r["input"] for r in splits["eval"]}
    for name in ("sft_train", "pref_train", "rm_train", "rl_prompts"):
        key = "prompt" if name.startswith(("pref", "rm")) else "input"
        assert not eval_q & {r[key] for r in splits[name]}, name


def test_rejected_is_wrong_and_chosen_right():
    rows = [json.loads(x) for x in (tiny_dir() / "preference" / "train.jsonl").read_text().splitlines()[:200]]
    for r in rows:
        assert extract_answer(r["chosen"]) == int(r["label"])
        assert extract_answer(r["rejected"]) != int(r["label"])


def test_rm_pairs_are_distinct_near_misses_of_every_training_question():
    from collections import defaultdict

    splits = make_splits(TaskSpec(), seed=0)
    rejected = defaultdict(list)
    for r in splits["rm_train"]:
        assert extract_answer(r["chosen"]) == int(r["label"]) != extract_answer(r["rejected"])
        rejected[r["prompt"]].append(extract_answer(r["rejected"]))
    assert set(rejected) == {r["prompt"] for r in splits["pref_train"]}  # every training question
    assert all(len(v) == len(set(v)) == 6 for v in rejected.values())  # 6 different mistakes each
    assert not {r["prompt"] for r in splits["rm_test"]} & set(rejected)  # held-out questions
    misses = near_misses(Problem(29, "-", 18))  # the SFT policy's kind of mistake: 29 - 18 = 10
    assert {10, 12, 21, 1, 47} <= set(misses) and 11 not in misses and min(misses) >= 0


def test_reward_func():
    p = Problem(12, "+", 7)
    prompt = "<|user|>\nWhat is 12 + 7?<|end|>\n<|assistant|>\n"
    queries = [prompt + "12 + 7 = 19<|end|>", prompt + "12 + 7 = 18", prompt + "no idea"]
    assert reward_func(queries, [prompt] * 3, ["19"] * 3) == [1.0, 0.0, 0.0]
    assert p.answer == 19
    # no label: the answer comes from the question (3 * 4 after 12 + 7 in a two-turn prompt)
    two_turns = prompt + "12 + 7 = 19<|end|>\n<|user|>\nWhat is 3 * 4?<|end|>\n<|assistant|>\n"
    assert reward_func([two_turns + "12", two_turns + "19"], [two_turns] * 2, [None, None]) == [1.0, 0.0]
    assert reward_func(queries, [prompt] * 3, [None] * 3) == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="no 'What is a op b\\?' question"):
        reward_func(["hi 3"], ["hi"], [None])
    with pytest.raises(ValueError, match="one prompt and label per query"):
        reward_func(queries, [prompt], ["19"])


def test_digits_are_single_tokens():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir() / "tokenizer")
    pieces = tok.convert_ids_to_tokens(tok("123 + 45", add_special_tokens=False)["input_ids"])
    assert [p for p in pieces if p.strip("Ġ").isdigit()] == ["1", "2", "3", "4", "5"]
    assert tok.chat_template and tok.eos_token == "<|end|>"


def test_kl_to_reference_is_zero_for_the_same_model_and_positive_after_a_change(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from alignment.tiny_world.base_model import make_base
    from alignment.tiny_world.evaluate import kl_to_reference

    base = make_base(tmp_path / "base", seed=0)
    moved = AutoModelForCausalLM.from_pretrained(base)
    with torch.no_grad():
        moved.lm_head.weight.add_(
            0.05 * torch.randn(moved.lm_head.weight.shape, generator=torch.Generator().manual_seed(0))
        )
    moved.save_pretrained(tmp_path / "moved")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (tmp_path / "moved" / name).write_bytes((base / name).read_bytes())
    assert kl_to_reference(base, base, limit=8, samples=2) == 0.0
    assert kl_to_reference(tmp_path / "moved", base, limit=8, samples=2) > 0.01
