"""Preference and unpaired datasets: masks, collation, and the bad-input rules of the issue."""

import logging

import pytest
import torch

from alignment.config import ConfigError, DPOConfig, KTOConfig, RMConfig
from alignment.datasets.preference import PairTokenizer, collate_pairs
from alignment.datasets.sources import DataError, read_rows
from alignment.datasets.unpaired import UnpairedTokenizer, collate_unpaired
from alignment.tiny_world.paths import tiny_dir


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir() / "tokenizer")


def dpo_cfg(**kw):
    return DPOConfig(
        **{"pretrain": "m", "dataset": "d", "prompt_key": "prompt", "apply_chat_template": True, "max_len": 64, **kw}
    )


def test_pairs_share_the_prompt_and_mask_only_the_response(tok):
    rows = read_rows(f"json@{tiny_dir() / 'preference'}", "test")[:4]
    pairs = PairTokenizer(tok, dpo_cfg(), "pref")(rows)
    p = pairs[0]
    n_prompt = p.chosen.loss_mask.index(1)
    assert p.chosen.input_ids[:n_prompt] == p.rejected.input_ids[:n_prompt]
    response = tok.decode([t for t, m in zip(p.chosen.input_ids, p.chosen.loss_mask) if m])
    assert response.startswith(rows[0]["chosen"]) and response.rstrip().endswith("<|end|>")


def test_reward_model_pairs_end_at_eos_where_generation_stops(tok):
    """The RM reads its value at the last token. Generated responses (PPO, batch_inference) end at EOS;
    the chat template adds a newline after it. RM data ends at EOS so training and scoring read the
    same token; DPO keeps the template's text."""
    from alignment.datasets.formatting import end_at_eos

    rows = read_rows(f"json@{tiny_dir() / 'preference'}", "test")[:4]
    rm = PairTokenizer(
        tok,
        RMConfig(pretrain="m", dataset="d", prompt_key="prompt", apply_chat_template=True, max_len=64),
        "pref",
        end_at_eos=True,
    )(rows)
    dpo = PairTokenizer(tok, dpo_cfg(), "pref")(rows)
    assert all(p.chosen.input_ids[-1] == p.rejected.input_ids[-1] == tok.eos_token_id for p in rm)
    assert all(tok.decode(p.chosen.input_ids[-1:]) == "\n" for p in dpo)
    assert [p.chosen.input_ids for p in rm] == [p.chosen.input_ids[:-1] for p in dpo]
    assert end_at_eos("1 + 1 = 2<|end|>\n", "<|end|>") == "1 + 1 = 2<|end|>"
    assert end_at_eos("1 + 1 = 2", "<|end|>") == "1 + 1 = 2"  # unfinished: left as it is
    assert end_at_eos("a<|end|>\nb", "<|end|>") == "a<|end|>\nb"  # text after EOS is not whitespace


@pytest.mark.parametrize("packed", [False, True])
def test_collate_pairs_last_tokens(tok, packed):
    rows = read_rows(f"json@{tiny_dir() / 'preference'}", "test")[:3]
    pairs = PairTokenizer(tok, dpo_cfg(), "pref")(rows)
    pb = collate_pairs(pairs, packed, tok.pad_token_id, torch.bool)
    rows_idx, cols = pb.batch.last_token()
    seqs = [p.chosen for p in pairs] + [p.rejected for p in pairs]
    last = pb.batch.input_ids[rows_idx, cols].tolist()
    assert last == [s.input_ids[-1] for s in seqs] and pb.num_pairs == 3


def test_identical_pair_is_counted_and_skipped(tok, caplog):
    rows = [
        {"prompt": "What is 1 + 1?", "chosen": "1 + 1 = 2", "rejected": "1 + 1 = 2"},
        {"prompt": "What is 1 + 2?", "chosen": "1 + 2 = 3", "rejected": "1 + 2 = 4"},
    ]
    t = PairTokenizer(tok, dpo_cfg(), "pairs.jsonl")
    with caplog.at_level(logging.WARNING):
        pairs = t(rows)
    assert len(pairs) == 1 and t.skipped_identical == 1
    assert "skipped 1 of 2 pairs whose chosen equals rejected" in caplog.text
    with pytest.raises(DataError, match="no usable preference pairs in 1 rows \\(1 had chosen == rejected"):
        t(rows[:1])


def test_missing_rejected_key_names_row_and_flag(tok):
    with pytest.raises(DataError, match=r"pairs.jsonl row 0: missing key 'rejected' \(--rejected_key\)"):
        PairTokenizer(tok, dpo_cfg(), "pairs.jsonl")([{"prompt": "q", "chosen": "a"}])


def test_conversation_pairs_without_prompt_key(tok):
    conv = [{"role": "user", "content": "What is 1 + 2?"}]
    rows = [
        {
            "chosen": conv + [{"role": "assistant", "content": "1 + 2 = 3"}],
            "rejected": conv + [{"role": "assistant", "content": "1 + 2 = 4"}],
        }
    ]
    pair = PairTokenizer(tok, dpo_cfg(prompt_key=None), "conv")(rows)[0]
    assert tok.decode([t for t, m in zip(pair.rejected.input_ids, pair.rejected.loss_mask) if m]).startswith(
        "1 + 2 = 4"
    )


def test_margin_read_when_asked(tok):
    cfg = RMConfig(pretrain="m", dataset="d", prompt_key="prompt", max_len=64, margin_loss=True)
    rows = [{"prompt": "q", "chosen": "a", "rejected": "b", "margin": 0.5}]
    assert PairTokenizer(tok, cfg, "m")(rows, use_margin=True)[0].margin == 0.5
    with pytest.raises(DataError, match="'margin' is 'big', not a number"):
        PairTokenizer(tok, cfg, "m")([dict(rows[0], margin="big")], use_margin=True)
    with pytest.raises(DataError, match=r"row 0: missing key 'margin' \(--margin_loss\)"):  # not a KeyError
        PairTokenizer(tok, cfg, "m", use_margin=True)([{"prompt": "q", "chosen": "a", "rejected": "b"}])


def kto_cfg(**kw):
    return KTOConfig(
        **{"pretrain": "m", "dataset": "d", "output_key": "output", "apply_chat_template": True, "max_len": 64, **kw}
    )


def test_kto_labels_and_mismatched_pairs(tok):
    rows = read_rows(f"json@{tiny_dir() / 'unpaired'}", "test")[:4]
    samples = UnpairedTokenizer(tok, kto_cfg(), "u")(rows)
    assert [s.desirable for s in samples] == [r["label"] for r in rows]
    ub = collate_unpaired(samples, False, tok.pad_token_id, torch.bool, 64)
    mm = ub.mismatched
    first = mm.input_ids[0, : mm.lengths[0]].tolist()
    assert first == samples[0].prompt_ids + samples[1].response_ids  # prompt 0 with response 1


@pytest.mark.parametrize("label", ["yes", 1, None, "maybe"])
def test_kto_label_outside_true_false(tok, label):
    with pytest.raises(DataError, match=r"row 0: --label_key 'label' is .*KTO needs true \(desirable\) or false"):
        UnpairedTokenizer(tok, kto_cfg(), "u.jsonl")([{"input": "q", "output": "a", "label": label}])


def test_kto_string_labels_accepted(tok):
    out = UnpairedTokenizer(tok, kto_cfg(), "u")(
        [{"input": "q", "output": "a", "label": "True"}, {"input": "q", "output": "b", "label": "false"}]
    )
    assert [s.desirable for s in out] == [True, False]


@pytest.mark.parametrize(
    "cls, kw, needle",
    [
        (DPOConfig, {"ipo": True, "label_smoothing": 0.1}, "--ipo with --label_smoothing > 0"),
        (DPOConfig, {"beta": 0.0}, "--beta 0.0: must be > 0"),
        (DPOConfig, {"label_smoothing": 0.7}, "--label_smoothing 0.7: must be in [0, 0.5)"),
        (RMConfig, {"margin_loss": True, "loss": "logexp"}, "--margin_loss needs --loss sigmoid"),
        (KTOConfig, {"output_key": "output", "micro_train_batch_size": 1}, "KTO needs >= 2"),
        (KTOConfig, {}, "--output_key is required for KTO"),
    ],
)
def test_config_refusals(cls, kw, needle):
    with pytest.raises(ConfigError) as e:
        cls(pretrain="m", dataset="d", **kw).validate()
    assert needle in str(e.value)
