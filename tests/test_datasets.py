"""Dataset reading, formatting and the bad-input errors (one line naming the problem and fix)."""

import json

import pytest

from alignment.config import SFTConfig
from alignment.datasets.mixing import blend
from alignment.datasets.sft import SFTTokenizer
from alignment.datasets.sources import DataError, read_rows
from alignment.tiny_world.paths import tiny_dir


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir() / "tokenizer")


def cfg(**kw):
    base = dict(pretrain="m", dataset="d", input_key="input", output_key="output", max_len=64)
    base.update(kw)
    return SFTConfig(**base)


def write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_json_at_dir_reads_splits():
    train = read_rows(f"json@{tiny_dir() / 'sft'}", "train")
    test = read_rows(f"json@{tiny_dir() / 'sft'}", "test")
    assert len(train) == 1000 and len(test) == 100


def test_malformed_line_names_file_and_line(tmp_path):
    f = write(tmp_path / "bad.jsonl", ['{"input": "a", "output": "b"}', '{"input": "a", "output": '])
    with pytest.raises(DataError, match=r"bad\.jsonl:2: malformed JSON") as e:
        read_rows(f)
    assert "\n" not in str(e.value)


def test_missing_key_names_flag_and_keys(tmp_path, tok):
    rows = read_rows(write(tmp_path / "d.jsonl", ['{"question": "q", "response": "r"}']))
    with pytest.raises(DataError, match=r"row 0: missing key 'input' \(--input_key\).*'question'"):
        SFTTokenizer(tok, cfg(), source="d.jsonl")(rows)


def test_empty_dataset(tmp_path):
    with pytest.raises(DataError, match="is empty: it has 0 rows"):
        read_rows(write(tmp_path / "e.jsonl", [""]))


def test_missing_split(tmp_path):
    (tmp_path / "x").mkdir()
    write(tmp_path / "x" / "train.jsonl", ['{"a": 1}'])
    with pytest.raises(DataError, match="has no 'test' split"):
        read_rows(f"json@{tmp_path / 'x'}", "test")


def test_tokenizer_without_chat_template(tok):
    from copy import deepcopy

    bare = deepcopy(tok)
    bare.chat_template = None
    with pytest.raises(DataError, match="has no chat template; pass --tokenizer_chat_template"):
        SFTTokenizer(bare, cfg(apply_chat_template=True))


def test_hub_name_offline_says_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(
        DataError, match=r"could not be loaded from the Hugging Face hub \(the hub is offline.*local \.jsonl"
    ):
        read_rows("someorg/some-dataset")


def test_input_template_appends_eos_and_masks_prompt(tok):
    c = cfg(input_template="User: {}\nAssistant: ")
    (s,), _ = SFTTokenizer(tok, c)([{"input": "What is 1 + 1?", "output": "1 + 1 = 2"}])
    text = tok.decode(s.input_ids)
    assert text.startswith("User: What is 1 + 1?\nAssistant: ") and text.endswith("<|end|>")
    target = tok.decode([t for t, m in zip(s.input_ids, s.loss_mask) if m])
    assert target == "1 + 1 = 2<|end|>"


def test_chat_template_masks_only_assistant(tok):
    row = json.loads((tiny_dir() / "sft" / "train.jsonl").read_text().splitlines()[0])
    (s,), _ = SFTTokenizer(tok, cfg(input_key="context_messages", apply_chat_template=True, multiturn=True))([row])
    target = tok.decode([t for t, m in zip(s.input_ids, s.loss_mask) if m])
    assert target == row["output"] + "<|end|>\n"


def test_multiturn_trains_every_assistant_turn(tok):
    msgs = [
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4"},
    ]
    (s,), _ = SFTTokenizer(tok, cfg(input_key="m", apply_chat_template=True, multiturn=True))([{"m": msgs}])
    target = tok.decode([t for t, m in zip(s.input_ids, s.loss_mask) if m])
    assert target == "2<|end|>\n4<|end|>\n"


def test_truncation_counted_and_prompt_only_dropped(tok, caplog):
    rows = [{"input": "x " * 40, "output": "y"}, {"input": "q", "output": "a " * 40}, {"input": "q", "output": "a"}]
    samples, stats = SFTTokenizer(tok, cfg(max_len=16))(rows)
    assert stats.truncated == 2 and stats.dropped == 1 and len(samples) == 2
    assert all(len(s.input_ids) <= 16 for s in samples)
    assert "were truncated" in caplog.text


def test_pretrain_mode_trains_on_every_token(tok):
    (s,), _ = SFTTokenizer(tok, cfg(pretrain_mode=True, output_key=None))([{"input": "What is 3 + 4?"}])
    assert s.loss_mask[0] == 0 and all(s.loss_mask[1:])


def test_mixing_follows_probabilities(tmp_path):
    a = write(tmp_path / "a.jsonl", [json.dumps({"src": "a", "i": i}) for i in range(1000)])
    b = write(tmp_path / "b.jsonl", [json.dumps({"src": "b", "i": i}) for i in range(1000)])
    rows = blend(f"{a},{b}", "0.3,0.7", "train", 2000, seed=1)
    share_a = sum(r["src"] == "a" for r in rows) / len(rows)
    assert len(rows) == 2000 and abs(share_a - 0.3) < 0.04
    assert blend(f"{a},{b}", "0.3,0.7", "train", 2000, seed=1) == rows  # deterministic


def test_parquet_csv_arrow_and_save_to_disk_give_the_jsonl_rows(tmp_path):
    """The same 200 rows as jsonl, parquet (a file and parquet@DIR), csv (string columns), arrow and
    a save_to_disk DatasetDict: read_rows gives the same samples, in order; slices as 🤗 datasets does."""
    import datasets

    rows = read_rows(f"json@{tiny_dir() / 'sft'}", "train")[:200]
    flat = [{"input": r["input"], "output": r["output"]} for r in rows]
    ds = datasets.Dataset.from_list(rows)
    (tmp_path / "pq").mkdir()
    ds.to_parquet(str(tmp_path / "pq" / "train-00000.parquet"))
    ds.to_parquet(str(tmp_path / "one.parquet"))
    datasets.Dataset.from_list(flat).to_csv(str(tmp_path / "flat.csv"), index=False)
    datasets.DatasetDict({"train": ds, "test": ds.select(range(10))}).save_to_disk(str(tmp_path / "saved"))
    ds.save_to_disk(str(tmp_path / "one_saved"))
    arrow = next((tmp_path / "one_saved").glob("*.arrow"))
    assert read_rows(str(tmp_path / "one.parquet")) == rows
    assert read_rows(f"parquet@{tmp_path / 'pq'}", "train") == rows
    assert read_rows(str(tmp_path / "flat.csv")) == flat
    assert read_rows(str(arrow)) == rows
    assert read_rows(str(tmp_path / "saved"), "train") == rows and len(read_rows(str(tmp_path / "saved"), "test")) == 10
    assert read_rows(str(tmp_path / "one_saved")) == rows
    assert read_rows(str(tmp_path / "one.parquet"), "train[:10%]") == rows[:20]
    assert read_rows(f"json@{tiny_dir() / 'sft'}", "train[10:15]") == read_rows(f"json@{tiny_dir() / 'sft'}")[10:15]
    with pytest.raises(DataError, match="has no 'validation' split; it has train, test"):
        read_rows(str(tmp_path / "saved"), "validation")
    with pytest.raises(DataError, match="expected NAME or NAME"):
        read_rows(str(tmp_path / "one.parquet"), "train[:ten]")
    (tmp_path / "broken.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="broken.parquet: not a readable parquet file"):
        read_rows(str(tmp_path / "broken.parquet"))


def test_openrlhf_name_at_data_dir_specs():
    from alignment.datasets.sources import resolve

    hub = resolve("openai/gsm8k@main")
    assert (hub.kind, hub.location, hub.data_dir) == ("hub", "openai/gsm8k", "main")
    with pytest.raises(DataError, match="the hub is offline"):
        read_rows("openai/gsm8k@main", "train")
    with pytest.raises(DataError, match="NAME is a file format"):
        resolve("xml@/tmp")
