"""The batched HF rollout engine: left-padded batched generation equals one prompt at a time, by hand."""

from __future__ import annotations

import pytest
import torch

from alignment.rollout.hf_engine import HFEngine, _cut_at_eos
from alignment.rollout.types import Rollout, SamplingParams


@pytest.fixture(scope="module")
def model_and_tok(tiny_base):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(
        tiny_base
    )


def greedy_by_hand(model, prompt: list[int], steps: int, eos: int) -> list[int]:
    """Full forward each step, no cache, no padding: the reference the engine must match."""
    seq = list(prompt)
    for _ in range(steps):
        with torch.no_grad():
            nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
        seq.append(nxt)
        if nxt == eos:
            break
    return seq[len(prompt) :]


def test_batched_greedy_equals_one_by_one(model_and_tok):
    model, tok = model_and_tok
    questions = ["What is 3 + 4?", "What is 12 * 7?", "What is 40 - 38? Answer briefly.", "Hi"]
    prompts = [tok(q, add_special_tokens=False)["input_ids"] for q in questions]
    assert len({len(p) for p in prompts}) > 1  # padding really happens
    engine = HFEngine(model, tok.eos_token_id, tok.pad_token_id, batch_size=3)  # two chunks
    out = engine.generate(prompts, SamplingParams(max_new_tokens=8, greedy=True))
    assert out.prompt_index == [0, 1, 2, 3] and out.prompt_ids == prompts
    for p, r in zip(prompts, out.response_ids):
        assert r == greedy_by_hand(model, p, 8, tok.eos_token_id)


def test_responses_continue_from_one_shared_prompt_cache(model_and_tok):
    """n > 1: each prompt's KV cache is computed once and repeated; greedy responses still equal the
    by-hand ones for left-padded prompts of different lengths."""
    model, tok = model_and_tok
    questions = ["What is 3 + 4?", "What is 40 - 38? Answer briefly.", "Hi there"]
    prompts = [tok(q, add_special_tokens=False)["input_ids"] for q in questions]
    engine = HFEngine(model, tok.eos_token_id, tok.pad_token_id)
    out = engine.generate(prompts, SamplingParams(max_new_tokens=8, greedy=True, n=3))
    assert out.prompt_index == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    for k, r in zip(out.prompt_index, out.response_ids):
        assert r == greedy_by_hand(model, prompts[k], 8, tok.eos_token_id)


def test_max_len_gives_each_prompt_its_own_budget(model_and_tok):
    """--max_len: a response takes at most max_total_len minus its prompt's tokens (greedy: the by-hand response cut
    there), and a response cut before its eos is not finished."""
    model, tok = model_and_tok
    prompts = [tok(q, add_special_tokens=False)["input_ids"] for q in ["What is 40 - 38? Answer briefly.", "Hi"]]
    total = len(prompts[0]) + 3
    out = HFEngine(model, tok.eos_token_id, tok.pad_token_id).generate(
        prompts, SamplingParams(max_new_tokens=8, greedy=True, max_total_len=total)
    )
    for p, r, done in zip(prompts, out.response_ids, out.finished):
        full = greedy_by_hand(model, p, 8, tok.eos_token_id)
        assert r == full[: min(8, total - len(p))]
        assert done == (r[-1:] == [tok.eos_token_id])
    assert len(out.response_ids[0]) <= 3


def test_n_samples_per_prompt_are_grouped_and_seeded(model_and_tok):
    model, tok = model_and_tok
    prompts = [tok(q, add_special_tokens=False)["input_ids"] for q in ("What is 1 + 1?", "What is 9 - 2?")]
    engine = HFEngine(model, tok.eos_token_id, tok.pad_token_id)
    params = SamplingParams(max_new_tokens=6, temperature=1.0, n=4, seed=5)
    a, b = engine.generate(prompts, params), engine.generate(prompts, params)
    assert a.prompt_index == [0, 0, 0, 0, 1, 1, 1, 1] and len(a) == 8
    assert a.response_ids == b.response_ids  # same seed, same samples
    assert len({tuple(r) for r in a.response_ids[:4]}) > 1  # temperature 1 really samples
    assert all(len(r) <= 6 for r in a.response_ids) and not model.training


def test_weights_loaded_into_the_engine_change_its_output(model_and_tok, tiny_base):
    import copy

    from transformers import AutoModelForCausalLM

    model, tok = model_and_tok
    model = copy.deepcopy(model)  # the trainer's copy; the module's model stays as loaded
    other = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32).eval()
    engine = HFEngine(other, tok.eos_token_id, tok.pad_token_id)
    prompt = [tok("What is 2 + 2?", add_special_tokens=False)["input_ids"]]
    greedy = SamplingParams(max_new_tokens=8, greedy=True)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)  # an "update" of the trainer's copy
    assert engine.generate(prompt, greedy).response_ids[0] != greedy_by_hand(model, prompt[0], 8, tok.eos_token_id)
    assert engine.load_weights(model.named_parameters()) == len(list(model.parameters()))
    assert engine.generate(prompt, greedy).response_ids[0] == greedy_by_hand(model, prompt[0], 8, tok.eos_token_id)
    with pytest.raises(KeyError, match="has no parameter 'nope'"):
        engine.load_weights([("nope", torch.zeros(1))])


def test_cut_at_eos_and_bad_params():
    assert _cut_at_eos([5, 6, 2, 0, 0], {2}) == ([5, 6, 2], True)
    assert _cut_at_eos([5, 6, 7], {2}) == ([5, 6, 7], False)
    r = Rollout()
    r.extend(Rollout([[1]], [[2]], [0], [True]), index_offset=3)
    assert r.prompt_index == [3] and r.response_tokens() == 1
    with pytest.raises(ValueError, match="temperature 0"):
        SamplingParams(max_new_tokens=4, temperature=0)


def test_rollout_batch_logprobs_equal_unpadded_forward(model_and_tok):
    from alignment.ppo.batch import action_logprobs, rollout_to_batch

    model, tok = model_and_tok
    prompts = [tok(q, add_special_tokens=False)["input_ids"] for q in ("What is 3 + 4?", "Hi")]
    rollout = HFEngine(model, tok.eos_token_id, tok.pad_token_id).generate(
        prompts, SamplingParams(max_new_tokens=5, n=2, seed=1)
    )
    batch = rollout_to_batch(rollout, tok.pad_token_id)
    assert batch.response_lengths.tolist() == [len(r) for r in rollout.response_ids]
    with torch.no_grad():
        got = action_logprobs(model, batch)
        for i, (p, r) in enumerate(zip(rollout.prompt_ids, rollout.response_ids)):
            logits = model(torch.tensor([p + r])).logits[0, len(p) - 1 : -1].log_softmax(-1)
            want = logits.gather(1, torch.tensor(r)[:, None]).squeeze(1)
            assert torch.allclose(got[i][batch.action_mask[i] > 0], want, atol=1e-5)


def test_sampling_from_non_finite_weights_names_the_weight(model_and_tok):
    """A policy whose weights overflowed mid-run (PPO's next rollout) made torch.multinomial raise "probability
    tensor contains either inf, nan or element < 0", a traceback a flow retries as a crash: now one
    NonFiniteError line (exit 2) naming the first non-finite weight."""
    import copy

    from alignment.nonfinite import NonFiniteError

    model, tok = model_and_tok
    model = copy.deepcopy(model)
    name, weight = next((n, p) for n, p in model.named_parameters() if n.endswith("mlp.down_proj.weight"))
    with torch.no_grad():
        weight.fill_(float("inf"))
    engine = HFEngine(model, tok.eos_token_id, tok.pad_token_id)
    prompt = [tok("What is 2 + 2?", add_special_tokens=False)["input_ids"]]
    with pytest.raises(NonFiniteError, match=f"generation: the next-token probabilities are NaN/Inf: weight {name} "):
        engine.generate(prompt, SamplingParams(max_new_tokens=4, seed=0))
