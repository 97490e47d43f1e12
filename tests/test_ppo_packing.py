"""--packing_samples in the PPO family: log-probs and values from packed rows equal the padded
pass's within 1e-5 (SDPA block mask), gradients too; fewer tokens are computed, and the samples of
one prompt (GRPO/RLOO's --n_samples_per_prompt) compute it once."""

from __future__ import annotations

import pytest
import torch

from alignment.models.reward_model import ValueCapture, load_reward_model
from alignment.ppo.batch import SequenceBatch, action_logprobs, rollout_to_batch
from alignment.ppo.packed import Packing, pack, unit_capacity
from alignment.ppo.rank_ops import value_forward
from alignment.rollout.types import Rollout


def batch_of(
    lengths: list[tuple[int, int]],
    vocab: int = 200,
    seed: int = 0,
    prompt_of: list[int] | None = None,
) -> SequenceBatch:
    """Rows of (prompt, response) lengths with random tokens; prompt_of[i]: the prompt row i samples
    from (rows of one prompt share its tokens; their lengths must agree), default: its own."""
    g = torch.Generator().manual_seed(seed)
    prompt_of = prompt_of or list(range(len(lengths)))
    own = {k: torch.randint(3, vocab, (lengths[prompt_of.index(k)][0],), generator=g).tolist() for k in set(prompt_of)}
    prompts = [own[k] for k in prompt_of]
    responses = [torch.randint(3, vocab, (r,), generator=g).tolist() for _, r in lengths]
    rollout = Rollout(
        prompt_ids=prompts, response_ids=responses, prompt_index=prompt_of, finished=[True] * len(lengths)
    )
    return rollout_to_batch(rollout, pad_id=0)


LENGTHS = [(5, 9), (12, 3), (3, 2), (7, 20), (4, 4), (9, 1)]
# 3 prompts x 4 samples, shuffled as a micro-batch may hold them, responses of 1..11 tokens
GROUPED = dict(
    lengths=[(6, 3), (11, 1), (6, 9), (4, 2), (11, 7), (6, 1), (4, 11), (11, 2), (4, 5), (6, 4), (11, 3), (4, 1)],
    prompt_of=[0, 1, 0, 2, 1, 0, 2, 1, 2, 0, 1, 2],
)
CASES = {"own prompts": dict(lengths=LENGTHS), "shared prompts": GROUPED}


def test_packing_layout_keeps_each_sample_whole_and_in_fewer_tokens():
    b = batch_of(LENGTHS)
    rows = pack(b.sequences, b.attention_mask, Packing(torch.bool))
    assert rows.input_ids.numel() < b.sequences.numel() and rows.input_ids.shape[1] <= b.sequences.shape[1]
    assert torch.equal(rows.input_ids[rows.dst], b.sequences[rows.src])
    assert torch.equal(rows.position_ids[rows.dst], rows.src[1])  # each sample's positions restart at 0
    assert len(rows.src[0]) == sum(p + r for p, r in LENGTHS) and not len(rows.branches)


def test_samples_of_one_prompt_compute_it_once():
    b = batch_of(**GROUPED)
    args = (b.sequences, b.attention_mask, Packing(torch.bool))
    rows = pack(*args, prompt_lengths=b.prompt_lengths)
    real = (rows.input_ids != 0).sum().item()
    prompts = {p for p, _ in GROUPED["lengths"]}  # the 3 prompts' lengths differ
    assert real == sum(prompts) + sum(r for _, r in GROUPED["lengths"])
    assert torch.equal(rows.input_ids[rows.dst], b.sequences[rows.src])
    assert torch.equal(rows.position_ids[rows.dst], rows.src[1])  # a response continues from its prompt
    assert len(rows.branches) == len(GROUPED["lengths"]) - len(prompts)  # every response but a prompt's first
    plain = pack(*args)  # without prompt lengths: each sample alone
    assert (plain.input_ids != 0).sum().item() == sum(p + r for p, r in GROUPED["lengths"])

    # 20 responses of 10 tokens to a 6-token prompt: a unit is at most 8 batch widths (128 tokens),
    # so 6 + 12 x 10 at a time, and the prompt is computed twice
    many = batch_of([(6, 10)] * 20, prompt_of=[0] * 20)
    units = pack(many.sequences, many.attention_mask, Packing(torch.bool), prompt_lengths=many.prompt_lengths)
    assert unit_capacity(many.sequences.shape[1]) == 128 and unit_capacity(1000) == 4096 and unit_capacity(5000) == 5000
    assert units.input_ids.shape == (2, 126) and (units.input_ids != 0).sum().item() == 2 * 6 + 200


@pytest.mark.parametrize("case", CASES)
def test_packed_logprobs_and_values_equal_padded(tiny_base, case):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32, attn_implementation="sdpa")
    b = batch_of(**CASES[case])
    padded = action_logprobs(model, b)
    packed = action_logprobs(model, b, Packing(torch.bool))
    assert padded.shape == packed.shape and (padded != 0).sum() == sum(r for _, r in CASES[case]["lengths"])
    assert torch.allclose(padded, packed, atol=1e-5), (padded - packed).abs().max()

    (padded * b.action_mask).sum().backward()  # the same gradients too
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    (action_logprobs(model, b, Packing(torch.bool)) * b.action_mask).sum().backward()
    # a shared prompt's gradient sums its samples' contributions in another order: within 1e-5 of the largest
    scale = max(g.abs().max().item() for g in grads.values())
    assert max((grads[n] - p.grad).abs().max().item() for n, p in model.named_parameters()) < 1e-5 * max(1.0, scale)

    critic = load_reward_model(str(tiny_base), torch.float32, "sdpa", pad_token_id=0)
    capture = ValueCapture(critic)
    v_pad = value_forward(critic, capture, b)
    v_pack = value_forward(critic, capture, b, Packing(torch.bool))
    assert torch.allclose(v_pad, v_pack, atol=1e-5), (v_pad - v_pack).abs().max()


def test_training_order_keeps_a_prompts_samples_together_when_they_share_it():
    import random

    from alignment.ppo.rank_ops import _shuffled

    prompt_index = [3, 1, 3, 2, 1, 2, 3, 1, 2]
    order = _shuffled(prompt_index, random.Random(0), by_prompt=True)
    assert sorted(order) == list(range(9))
    runs = [prompt_index[i] for i in order]
    assert all(runs[k : k + 3] == [runs[k]] * 3 for k in (0, 3, 6))  # each prompt's 3 samples in a row
    assert _shuffled(prompt_index, random.Random(0), by_prompt=False) != order
