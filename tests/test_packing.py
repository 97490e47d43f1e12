"""Packed rows keep samples apart: same loss as the padded batch (fp32, tolerance 1e-5)."""

import pytest
import torch

from alignment.config import SFTConfig
from alignment.datasets.batch import TokenizedSample, collate_packed, collate_padded
from alignment.datasets.packing import block_causal_mask, first_fit_rows
from alignment.datasets.sft import SFTTokenizer
from alignment.datasets.sources import read_rows
from alignment.losses.nll import sft_loss
from alignment.tiny_world.paths import tiny_dir


def test_block_causal_mask_hand_checked():
    m = block_causal_mask(torch.tensor([[0, 0, 1]]))[0, 0]
    assert m.tolist() == [[True, False, False], [True, True, False], [False, False, True]]
    # longest first, each into the first row with room; a sample longer than a row gets its own
    assert first_fit_rows([3, 5, 2, 9, 4], capacity=8) == [[3], [1, 0], [4, 2]]
    b = collate_packed([TokenizedSample([5, 6], [0, 1]), TokenizedSample([7, 8, 9], [0, 1, 1])], torch.bool, 8)
    assert b.position_ids.tolist() == [[0, 1, 2, 0, 1]] and b.segment_map.tolist() == [[1, 1, 1, 0, 0]]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_loss_equals_padded_loss(tiny_base, attn):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_base)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32, attn_implementation=attn).eval()
    cfg = SFTConfig(
        pretrain=str(tiny_base),
        dataset="x",
        input_key="context_messages",
        apply_chat_template=True,
        multiturn=True,
        max_len=64,
    )
    rows = read_rows(f"json@{tiny_dir() / 'sft'}", "train")[:8]
    samples, _ = SFTTokenizer(tok, cfg)(rows)
    assert len({len(s.input_ids) for s in samples}) > 1  # lengths differ, so padding really happens
    padded = collate_padded(samples, tok.pad_token_id)
    packed = collate_packed(samples, torch.bool if attn == "sdpa" else torch.float32)
    with torch.no_grad():
        lp = model(input_ids=padded.input_ids, attention_mask=padded.attention_mask).logits
        lk = model(
            input_ids=packed.input_ids, attention_mask=packed.attention_mask, position_ids=packed.position_ids
        ).logits
    a = sft_loss(lp, padded.input_ids, padded.loss_mask)
    b = sft_loss(lk, packed.input_ids, packed.loss_mask)
    assert abs(a.item() - b.item()) < 1e-5, (a.item(), b.item())
    # and packing without the block mask would NOT be equal: the test can fail
    with torch.no_grad():
        leak = model(input_ids=packed.input_ids, position_ids=packed.position_ids).logits
    assert abs(sft_loss(leak, packed.input_ids, packed.loss_mask).item() - a.item()) > 1e-4


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_rows_of_max_len_equal_padded_loss_and_logps(tiny_base, attn):
    """With a dense mask, a micro-batch is packed into first-fit rows of <= --max_len tokens: the loss,
    each sample's summed log-probs and each sample's last token equal the padded batch's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from alignment.losses.logprobs import sequence_logps

    tok = AutoTokenizer.from_pretrained(tiny_base)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32, attn_implementation=attn).eval()
    cfg = SFTConfig(
        pretrain=str(tiny_base),
        dataset="x",
        input_key="context_messages",
        apply_chat_template=True,
        multiturn=True,
        max_len=64,
    )
    samples, _ = SFTTokenizer(tok, cfg)(read_rows(f"json@{tiny_dir() / 'sft'}", "train")[:9])
    padded = collate_padded(samples, tok.pad_token_id)
    packed = collate_packed(samples, torch.bool if attn == "sdpa" else torch.float32, row_tokens=64)
    assert packed.input_ids.shape[0] > 1 and packed.input_ids.shape[1] <= 64
    assert sorted(packed.segment_map[packed.segment_map >= 0].unique().tolist()) == list(range(9))
    with torch.no_grad():
        lp = model(input_ids=padded.input_ids, attention_mask=padded.attention_mask).logits
        lk = model(
            input_ids=packed.input_ids, attention_mask=packed.attention_mask, position_ids=packed.position_ids
        ).logits
    assert (
        abs(
            sft_loss(lp, padded.input_ids, padded.loss_mask).item()
            - sft_loss(lk, packed.input_ids, packed.loss_mask).item()
        )
        < 1e-5
    )
    a = sequence_logps(lp, padded.input_ids, padded.loss_mask)
    b = sequence_logps(lk, packed.input_ids, packed.loss_mask, packed.segments(), packed.num_samples)
    assert torch.allclose(a, b, atol=1e-4), (a, b)
    rows, cols = packed.last_token()
    assert packed.input_ids[rows, cols].tolist() == [s.input_ids[-1] for s in samples]
