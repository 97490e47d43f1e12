"""--packing_samples in the PPO family: log-probs and values from packed rows equal the padded
pass's within 1e-5 (SDPA block mask), gradients too; fewer tokens are computed."""
from __future__ import annotations

import torch

from alignment.models.reward_model import ValueCapture, load_reward_model
from alignment.ppo.batch import SequenceBatch, action_logprobs, rollout_to_batch
from alignment.ppo.packed import Packing, pack
from alignment.ppo.rank_ops import value_forward
from alignment.rollout.types import Rollout


def batch_of(lengths: list[tuple[int, int]], vocab: int = 200, seed: int = 0) -> SequenceBatch:
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, vocab, (p,), generator=g).tolist() for p, _ in lengths]
    responses = [torch.randint(3, vocab, (r,), generator=g).tolist() for _, r in lengths]
    rollout = Rollout(prompt_ids=prompts, response_ids=responses, prompt_index=list(range(len(lengths))),
                      finished=[True] * len(lengths))
    return rollout_to_batch(rollout, pad_id=0)


LENGTHS = [(5, 9), (12, 3), (3, 2), (7, 20), (4, 4), (9, 1)]


def test_packing_layout_keeps_each_sample_whole_and_in_fewer_tokens():
    b = batch_of(LENGTHS)
    rows = pack(b.sequences, b.attention_mask, Packing(torch.bool))
    assert rows.input_ids.numel() < b.sequences.numel() and rows.input_ids.shape[1] <= b.sequences.shape[1]
    assert torch.equal(rows.input_ids[rows.dst], b.sequences[rows.src])
    assert torch.equal(rows.position_ids[rows.dst], rows.src[1])          # each sample's positions restart at 0
    assert rows.has_next.sum() == sum(p + r - 1 for p, r in LENGTHS)


def test_packed_logprobs_and_values_equal_padded(tiny_base):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32, attn_implementation="sdpa")
    b = batch_of(LENGTHS)
    padded = action_logprobs(model, b)
    packed = action_logprobs(model, b, Packing(torch.bool))
    assert padded.shape == packed.shape and (padded != 0).sum() == sum(r for _, r in LENGTHS)
    assert torch.allclose(padded, packed, atol=1e-5), (padded - packed).abs().max()

    (padded * b.action_mask).sum().backward()                             # the same gradients too
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    (action_logprobs(model, b, Packing(torch.bool)) * b.action_mask).sum().backward()
    assert max((grads[n] - p.grad).abs().max().item() for n, p in model.named_parameters()) < 1e-5

    critic = load_reward_model(str(tiny_base), torch.float32, "sdpa", pad_token_id=0)
    capture = ValueCapture(critic)
    v_pad = value_forward(critic, capture, b)
    v_pack = value_forward(critic, capture, b, Packing(torch.bool))
    assert torch.allclose(v_pad, v_pack, atol=1e-5), (v_pad - v_pack).abs().max()
