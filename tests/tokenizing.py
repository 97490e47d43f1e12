"""The tiny world's tokenizer and rows as the tokenization tests use them (tests/test_tokenized_cache.py): an SFT
config, a row tokenizer of each kind, one that counts the rows it tokenizes, and a rows file with bad rows."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from alignment.config import DPOConfig, KTOConfig, PPOConfig, RMConfig, SFTConfig
from alignment.datasets.mixing import Rows, blend_rows
from alignment.datasets.preference import PairTokenizer
from alignment.datasets.prompts import PromptTokenizer
from alignment.datasets.sft import SFTTokenizer
from alignment.datasets.sources import read_rows
from alignment.datasets.unpaired import UnpairedTokenizer
from alignment.tiny_world.paths import tiny_dir

T = tiny_dir()


def load_tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(T / "tokenizer")


def sft_cfg(**kw) -> SFTConfig:
    return SFTConfig(
        **{
            "pretrain": "m",
            "dataset": "d",
            "input_key": "input",
            "output_key": "output",
            "apply_chat_template": True,
            "max_len": 48,
            **kw,
        }
    )


class CountingSFT(SFTTokenizer):
    """Appends a line per tokenized row (with the rank that did it) to $COUNT_FILE."""

    def columns(self, row, index):
        if index == 0:
            time.sleep(float(os.environ.get("FIRST_ROW_DELAY", "0")))  # widens the window two ranks could race in
        with open(os.environ["COUNT_FILE"], "a") as f:
            f.write(f"{os.environ.get('RANK', '0')}\n")
        return super().columns(row, index)


def counted(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def sft_rows(n: int = 120) -> Rows:
    return blend_rows(f"json@{T / 'sft'}", None, "train", n, 42)


def tokenizers(tok):
    """(row tokenizer, rows) for each kind: SFT, RM pairs (EOS end, margins), DPO pairs, KTO, PPO prompts."""
    pref = [dict(r, margin=i / 10) for i, r in enumerate(read_rows(f"json@{T / 'preference'}", "train")[:80])]
    kto = read_rows(f"json@{T / 'unpaired'}", "train")[:80]
    ppo = PPOConfig(
        pretrain="m", remote_rm_url="r.py", prompt_data="p", input_key="input", label_key="label", prompt_max_len=30
    )
    return [
        (SFTTokenizer(tok, sft_cfg(max_len=40), "sft"), sft_rows().dicts()),
        (
            PairTokenizer(
                tok,
                RMConfig(pretrain="m", dataset="d", prompt_key="prompt", apply_chat_template=True, max_len=40),
                "rm",
                end_at_eos=True,
                use_margin=True,
            ),
            pref,
        ),
        (
            PairTokenizer(
                tok,
                DPOConfig(
                    pretrain="m", dataset="d", prompt_key="prompt", max_len=64, input_template="User: {}\nAssistant: "
                ),
                "dpo",
            ),
            pref,
        ),
        (
            UnpairedTokenizer(
                tok, KTOConfig(pretrain="m", dataset="d", input_key="input", output_key="output", max_len=40), "kto"
            ),
            kto,
        ),
        (PromptTokenizer(tok, ppo, "prompts"), read_rows(f"json@{T / 'prompts'}", "train")[:80]),
    ]


def bad_rows_file(tmp_path: Path, first_shard_bad: bool = False) -> Path:
    rows = [{"input": f"q{i}", "output": "a"} for i in range(200)]
    rows[150] = {"input": 5, "output": "a"}  # in the second of two shards
    rows[190] = {"question": "q", "output": "a"}
    if first_shard_bad:
        rows[30] = {"output": "a"}
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
