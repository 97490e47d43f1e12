"""Tokenization through `Dataset.map(num_proc)` and its per-node cache (alignment.datasets.tokenized):
num_proc=2 gives num_proc=1's samples; a retry (new process objects, same inputs) reads the cache
without tokenizing; any changed input tokenizes again; bad rows keep their one-line errors; with
torch.distributed up, one rank per node tokenizes while the others wait."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from copy import deepcopy
from pathlib import Path

import pytest

from alignment.config import PPOConfig, SFTConfig
from alignment.datasets.mixing import Rows, to_line
from alignment.datasets.sft import SFTTokenizer
from alignment.datasets.sources import DataError
from alignment.datasets.tokenized import CACHE_ENV, auto_num_proc, columns_of, load_train_eval, tokenize
from alignment.tiny_world.paths import tiny_dir
from tests.conftest import python_env
from tests.tokenizing import CountingSFT, bad_rows_file, counted, load_tok, sft_cfg, sft_rows, tokenizers


@pytest.fixture(scope="module")
def tok():
    return load_tok()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "tokenized"))
    return tmp_path / "tokenized"


def test_num_proc_2_gives_the_samples_of_num_proc_1(tok, tmp_path, monkeypatch):
    for i, (t, rows) in enumerate(tokenizers(tok)):
        mixed = Rows([to_line(r) for r in rows])
        monkeypatch.setenv(CACHE_ENV, str(tmp_path / f"one{i}"))
        one = tokenize(mixed, t, 1)
        monkeypatch.setenv(CACHE_ENV, str(tmp_path / f"two{i}"))  # its own cache: really tokenized twice
        two = tokenize(mixed, t, 2)
        assert one == two == t.finish(columns_of(t, rows), len(rows))  # = the in-process loop
        assert len(list((tmp_path / f"two{i}").glob("*_of_00002.arrow"))) == 2
        assert one, t.source


def test_stats_and_warnings_come_through_the_cache(tok, cache, caplog):
    rows = sft_rows()
    t = SFTTokenizer(tok, sft_cfg(max_len=20), "sft")
    plain, stats = SFTTokenizer(tok, sft_cfg(max_len=20), "sft")(rows.dicts())
    for _ in range(2):  # tokenized, then read back
        caplog.clear()
        assert tokenize(rows, t, 1) == plain and t.stats == stats and stats.truncated > 0
        assert "were truncated" in caplog.text


def test_a_retry_reads_the_cache_without_tokenizing(tok, cache, tmp_path, monkeypatch):
    count = tmp_path / "count"
    monkeypatch.setenv("COUNT_FILE", str(count))
    rows = sft_rows()
    first = tokenize(rows, CountingSFT(tok, sft_cfg(), "sft"), 1)
    assert len(counted(count)) == len(rows)
    files = {p: p.stat().st_mtime_ns for p in cache.glob("*.arrow")}
    assert len(files) == 1
    # the retry: a new process has new objects (tokenizer, config, rows) for the same inputs
    again = tokenize(sft_rows(), CountingSFT(load_tok(), sft_cfg(), "sft"), 2)
    assert again == first and len(counted(count)) == len(rows)
    assert {p: p.stat().st_mtime_ns for p in cache.glob("*.arrow")} == files


@pytest.mark.parametrize("change", ["max_len", "chat_template", "output_key", "rows", "vocab"])
def test_a_changed_input_does_not_reuse_the_cache(tok, cache, tmp_path, monkeypatch, change):
    count = tmp_path / "count"
    monkeypatch.setenv("COUNT_FILE", str(count))
    rows = sft_rows(40)
    tokenize(rows, CountingSFT(tok, sft_cfg(), "sft"), 1)
    other_tok, cfg, other_rows = deepcopy(tok), sft_cfg(), rows
    if change == "max_len":
        cfg = sft_cfg(max_len=47)
    elif change == "chat_template":
        other_tok.chat_template = tok.chat_template.replace("<|end|>\n", "<|end|>\n\n")
    elif change == "output_key":
        cfg = sft_cfg(output_key="input")
    elif change == "rows":
        other_rows = Rows(rows.lines[:-1] + [rows.lines[-1].replace('"output": "', '"output": "so ')])
    else:
        other_tok.add_tokens(["<|new|>"])
    tokenize(other_rows, CountingSFT(other_tok, cfg, "sft"), 1)
    assert len(counted(count)) == 2 * len(rows) and len(list(cache.glob("*.arrow"))) == 2


def test_settings_name_every_config_field_a_tokenizer_reads(tok):
    """The cache key holds `settings()`: a field read by `columns` but missing there would let a
    changed flag reuse stale tokens."""

    class Recording:  # records the path of each setting read: "data.max_len"
        def __init__(self, obj, read, prefix=""):
            self.obj, self.read, self.prefix = obj, read, prefix

        def __getattr__(self, name):
            value = getattr(self.obj, name)
            if dataclasses.is_dataclass(value):  # a group (alignment.config.nested)
                return Recording(value, self.read, f"{self.prefix}{name}.")
            self.read.add(self.prefix + name)
            return value

    for t, rows in tokenizers(tok):
        read: set[str] = set()
        t.cfg = Recording(t.cfg, read)
        for i, row in enumerate(rows[:5]):
            t.columns(row, i)
        assert read and read <= set(t.settings()), (t.source, read - set(t.settings()))


@pytest.mark.parametrize(
    "cls, argv",
    [
        (SFTConfig, ["--pretrain", "m", "--dataset", "d", "--output_key", "o"]),
        (PPOConfig, ["--pretrain", "m", "--prompt_data", "p", "--remote_rm_url", "r.py"]),
    ],
)
def test_dataset_num_proc_is_a_flag_a_yaml_key_and_a_flow_parameter_outside_the_identity(cls, argv, tmp_path):
    from dataclasses import replace

    from alignflow.tasks.orchestration.params import stage_overrides
    from alignflow.tasks.orchestration.stage_spec import identity_hash
    from alignment.config import ConfigError, parse_args

    yaml = tmp_path / "c.yaml"
    yaml.write_text("dataset_num_proc: 3\n")
    assert parse_args(cls, [*argv, "--dataset_num_proc", "4"]).dataset_num_proc == 4
    cfg = parse_args(cls, [*argv, "--config", str(yaml)])
    assert cfg.dataset_num_proc == 3 and parse_args(cls, argv).dataset_num_proc == 0
    assert stage_overrides(cls, "X")(dataset_num_proc=2).dataset_num_proc == 2
    assert identity_hash("x", cfg) == identity_hash("x", replace(cfg, dataset_num_proc=0))  # same tokens either way
    with pytest.raises(ConfigError, match="--dataset_num_proc -1: must be >= 0"):
        parse_args(cls, [*argv, "--dataset_num_proc", "-1"])


def test_auto_num_proc():
    assert auto_num_proc(0, 500) == 1 and auto_num_proc(3, 500) == 3 and auto_num_proc(4, 2) == 2
    assert 1 <= auto_num_proc(0, 50_000) <= 8


def test_bad_json_line_still_names_file_and_line(tok, cache, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": "a", "output": "b"}\n{"input": "a", "output": \n')
    cfg = sft_cfg(dataset=str(bad), apply_chat_template=False)
    with pytest.raises(DataError, match=r"bad\.jsonl:2: malformed JSON") as e:
        load_train_eval(cfg, lambda src: SFTTokenizer(tok, cfg, src))
    assert "\n" not in str(e.value)


def test_bad_row_inside_map_with_num_proc_2(tok, cache, tmp_path):
    path = bad_rows_file(tmp_path)
    cfg = sft_cfg(dataset=str(path), apply_chat_template=False, dataset_num_proc=2)
    with pytest.raises(DataError) as e:
        load_train_eval(cfg, lambda src: SFTTokenizer(tok, cfg, src))
    # the first bad row (150 and 190 are both in the second shard), raised in this process
    assert str(e.value) == (
        f"{path} row 150: --input_key 'input' is a number (5); expected a string or a list "
        f"of {{role, content}} messages"
    )
    assert not list(cache.glob("*.arrow"))  # a dataset with a bad row leaves nothing in the cache


def test_the_lowest_bad_row_is_reported_whichever_shard_read_it(tok, cache, tmp_path):
    path = bad_rows_file(tmp_path, first_shard_bad=True)  # row 30, before row 150 of the second shard
    cfg = sft_cfg(dataset=str(path), apply_chat_template=False, dataset_num_proc=2)
    with pytest.raises(DataError, match=r"row 30: "):
        load_train_eval(cfg, lambda src: SFTTokenizer(tok, cfg, src))


def test_cli_prints_a_bad_row_of_num_proc_2_as_one_line(tiny_base, tmp_path):
    path = bad_rows_file(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "alignment.cli.train_sft",
            "--pretrain",
            str(tiny_base),
            "--dataset",
            str(path),
            "--input_key",
            "input",
            "--output_key",
            "output",
            "--dataset_num_proc",
            "2",
            "--max_len",
            "32",
            "--train_batch_size",
            "8",
            "--micro_train_batch_size",
            "8",
            "--save_path",
            str(tmp_path / "out"),
            "--ckpt_path",
            str(tmp_path / "ckpt"),
        ],
        env=python_env(**{CACHE_ENV: str(tmp_path / "tokenized")}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert lines == [
        f"error: {path} row 150: --input_key 'input' is a number (5); expected a string or a list "
        f"of {{role, content}} messages"
    ], proc.stderr[-3000:]


def _rank_main(rank: int, port: int, out: str) -> None:
    """One of two ranks on one node (gloo): both tokenize the same rows through the cache."""
    import torch.distributed as dist

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        rows, t = sft_rows(60), CountingSFT(load_tok(), sft_cfg(), "sft")
        dist.barrier()  # both ranks reach `tokenize` together, as after the CLI's common start-up
        samples = tokenize(rows, t, 1)
        Path(out, f"rank{rank}.json").write_text(json.dumps([[s.input_ids, s.loss_mask] for s in samples]))
    finally:
        dist.destroy_process_group()


def test_one_rank_per_node_tokenizes_while_the_others_wait(cache, tmp_path, monkeypatch):
    import torch.multiprocessing as mp

    from alignment.distributed.rank_actor import free_port

    count = tmp_path / "count"
    monkeypatch.setenv("COUNT_FILE", str(count))
    monkeypatch.setenv("FIRST_ROW_DELAY", "1")  # without the barrier, rank 1 would tokenize meanwhile
    mp.spawn(_rank_main, args=(free_port("127.0.0.1"), str(tmp_path)), nprocs=2, join=True)
    assert counted(count) == ["0"] * 60
    assert json.loads((tmp_path / "rank0.json").read_text()) == json.loads((tmp_path / "rank1.json").read_text())


def test_the_same_tokenizer_at_another_path_is_the_same_cache_entry(tmp_path):
    """Each stage's model folder holds a copy of its parent's tokenizer: found at another path it is the same
    cache entry (the RM stages of a pipeline re-tokenized 20,250 pairs each when the path was hashed); a changed
    chat template or padding side is another."""
    import shutil

    from transformers import AutoTokenizer

    from alignment.datasets.tokenized import tokenizer_digest

    for name in ("a", "b"):
        shutil.copytree(tiny_dir() / "tokenizer", tmp_path / name)
    a, b = (AutoTokenizer.from_pretrained(tmp_path / name) for name in ("a", "b"))
    assert tokenizer_digest(a) == tokenizer_digest(b)
    b.chat_template = (b.chat_template or "") + " "
    assert tokenizer_digest(a) != tokenizer_digest(b)
    a2 = AutoTokenizer.from_pretrained(tmp_path / "a")
    a2.padding_side = "left" if a.padding_side == "right" else "right"
    assert tokenizer_digest(a) != tokenizer_digest(a2)
