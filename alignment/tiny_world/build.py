"""Regenerate data/tiny deterministically: JSONL splits, tokenizer, tiny Llama config."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoTokenizer

from alignment.tiny_world.arithmetic import TaskSpec, make_splits
from alignment.tiny_world.tokenizer import train_tokenizer

# split name -> (folder, file): folders hold train/test files so `json@DIR` finds both splits
LAYOUT = {
    "sft_train": ("sft", "train.jsonl"),
    "sft_test": ("sft", "test.jsonl"),
    "pref_train": ("preference", "train.jsonl"),
    "pref_test": ("preference", "test.jsonl"),
    "unpaired_train": ("unpaired", "train.jsonl"),
    "unpaired_test": ("unpaired", "test.jsonl"),
    "rm_train": ("rm", "train.jsonl"),
    "rm_test": ("rm", "test.jsonl"),
    "rl_prompts": ("prompts", "train.jsonl"),
    "eval": ("prompts", "test.jsonl"),
}

# head_dim = 128 / 4 = 32: the smallest vLLM serves.
LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 32,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "attention_bias": False,
    "mlp_bias": False,
    "initializer_range": 0.02,
}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")


def build(out: str | Path, seed: int = 0, spec: TaskSpec = TaskSpec()) -> Path:
    out = Path(out)
    splits = make_splits(spec, seed)
    for name, (folder, filename) in LAYOUT.items():
        write_jsonl(out / folder / filename, splits[name])
    texts = [f"{r['input']}\n{r['output']}" for r in splits["sft_train"]]
    texts += [r["rejected"] for r in splits["pref_train"]]
    tok_dir = train_tokenizer(texts, out / "tokenizer")

    tok = AutoTokenizer.from_pretrained(tok_dir)
    config = dict(
        LLAMA_CONFIG,
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    (out / "llama_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return out
