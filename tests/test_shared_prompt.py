"""Preference pairs packed over their shared prompt (alignment/datasets/shared_prompt.py): the prompt's
tokens are computed once per pair, and the log-probs, last-token states (the RM's value) and DPO loss
equal those of chosen and rejected packed as two sequences, within 1e-5."""

import pytest
import torch

from alignment.config import DPOConfig
from alignment.datasets.batch import TokenizedSample, collate_packed
from alignment.datasets.preference import PairTokenizer, collate_pairs
from alignment.datasets.shared_prompt import collate_shared, shared_prefix
from alignment.datasets.sources import read_rows
from alignment.losses.logprobs import sequence_logps
from alignment.losses.preference import dpo_loss
from alignment.tiny_world.paths import tiny_dir


def test_a_pair_row_hand_checked():
    chosen, rejected = TokenizedSample([5, 6, 7, 8], [0, 0, 1, 1]), TokenizedSample([5, 6, 9], [0, 0, 1])
    assert shared_prefix(chosen, rejected) == 2
    # response tokens are never shared, and each tail keeps a token even when one sequence is a prefix
    assert shared_prefix(TokenizedSample([5, 6, 7], [0, 1, 1]), TokenizedSample([5, 6, 8], [0, 1, 1])) == 1
    assert shared_prefix(TokenizedSample([5, 6], [0, 0]), TokenizedSample([5, 6, 7], [0, 0, 1])) == 1
    b = collate_shared([chosen], [rejected], torch.bool, None)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9]] and b.position_ids.tolist() == [[0, 1, 2, 3, 2]]
    assert b.segment_map.tolist() == [[0, 0, 0, 0, 1]] and b.loss_mask.tolist() == [[0, 0, 1, 1, 1]]
    assert b.branches.tolist() == [[0, 4, 1]]  # token 9 is predicted at the prompt's last position
    assert b.attention_mask[0, 0].int().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 1, 0, 0, 1],
    ]
    assert b.lengths == [4, 3] and b.num_samples == 2


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_shared_prompt_rows_equal_two_sequences(tiny_base, attn):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_base)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32, attn_implementation=attn).eval()
    cfg = DPOConfig(pretrain="m", dataset="d", prompt_key="prompt", apply_chat_template=True, max_len=64)
    pairs = PairTokenizer(tok, cfg, "pref")(read_rows(f"json@{tiny_dir() / 'preference'}", "train")[:16])
    pairs.append(type(pairs[0])(TokenizedSample([3, 4, 5], [0, 1, 1]), TokenizedSample([6, 4, 5], [0, 1, 1])))
    mask_dtype = torch.bool if attn == "sdpa" else torch.float32
    shared = collate_pairs(pairs, True, tok.pad_token_id, mask_dtype, 64).batch
    apart = collate_packed([p.chosen for p in pairs] + [p.rejected for p in pairs], mask_dtype, 64)
    n = len(pairs)
    assert len(shared.branches) == n - 1  # the last pair shares no token: nothing moved
    real = lambda b: int((b.segment_map >= 0).sum())  # noqa: E731
    assert real(shared) < 0.85 * real(apart), (real(shared), real(apart))  # the prompts, once

    def run(b):
        with torch.no_grad():
            out = model(
                input_ids=b.input_ids,
                attention_mask=b.attention_mask,
                position_ids=b.position_ids,
                output_hidden_states=True,
            )
        rows, cols = b.last_token()
        logps = sequence_logps(out.logits, b.input_ids, b.loss_mask, b.segments(), b.num_samples, b.branches)
        return out.logits, logps, out.hidden_states[-1][rows, cols]

    logits, logps, last = run(shared)
    _, logps_apart, last_apart = run(apart)
    assert torch.allclose(logps, logps_apart, atol=1e-5, rtol=0), (logps - logps_apart).abs().max()
    assert torch.allclose(last, last_apart, atol=1e-5, rtol=0)  # what a reward model's head reads
    ref = logps_apart.flip(0)  # any reference log-probs
    a = dpo_loss(logps[:n], logps[n:], ref[:n], ref[n:], 0.1, 0.0, False).loss
    b = dpo_loss(logps_apart[:n], logps_apart[n:], ref[:n], ref[n:], 0.1, 0.0, False).loss
    assert abs(a.item() - b.item()) < 1e-5
    # the moved first tokens matter: read at their row neighbour, the rejected log-probs are wrong
    wrong = sequence_logps(logits, shared.input_ids, shared.loss_mask, shared.segments(), shared.num_samples)
    assert (wrong[n:] - logps_apart[n:]).abs().max() > 1e-2


def test_flash_attention_packing_keeps_two_sequences(tiny_base):
    """Without a dense mask (flash-attention's varlen path) a pair stays two sequences."""
    pairs = [
        type(
            "P",
            (),
            {
                "chosen": TokenizedSample([5, 6, 7], [0, 0, 1]),
                "rejected": TokenizedSample([5, 6, 8], [0, 0, 1]),
                "margin": 0.0,
            },
        )()
    ]
    b = collate_pairs(pairs, True, 0, None, 64).batch
    assert b.input_ids.tolist() == [[5, 6, 7, 5, 6, 8]] and b.branches is None and b.attention_mask is None
