"""Stage flags tuned for the tiny world on a 2-core CPU: one place for the demo, the
benchmarks and the docs. Each is a list of OpenRLHF-style flags, without model/output paths."""
from __future__ import annotations

from alignment.tiny_world.paths import tiny_dir


def sft_flags() -> list[str]:
    """1,200 steps (~2 minutes) train the 1,000 demonstrations to convergence; held-out
    accuracy then lands near 80 %, leaving room for the later stages."""
    d = tiny_dir() / "sft"
    return ["--dataset", f"json@{d}", "--eval_dataset", f"json@{d}", "--input_key", "context_messages",
            "--apply_chat_template", "--multiturn", "--max_len", "64", "--packing_samples",
            "--train_batch_size", "32", "--micro_train_batch_size", "32", "--max_epochs", "100",
            "--max_steps", "1200", "--learning_rate", "2e-3", "--lr_warmup_ratio", "0.03", "--zero_stage", "2",
            "--logging_steps", "25", "--eval_steps", "300", "--seed", "42"]


def _pairs() -> list[str]:
    d = tiny_dir() / "preference"
    return ["--dataset", f"json@{d}", "--eval_dataset", f"json@{d}", "--prompt_key", "prompt",
            "--apply_chat_template", "--max_len", "64", "--packing_samples", "--zero_stage", "2", "--seed", "42"]


def rm_flags() -> list[str]:
    return [*_pairs(), "--train_batch_size", "32", "--micro_train_batch_size", "32", "--max_epochs", "RM_EPOCHS",
            "--learning_rate", "RM_LR", "--logging_steps", "10", "--eval_steps", "-1"]


def dpo_flags() -> list[str]:
    return [*_pairs(), "--train_batch_size", "32", "--micro_train_batch_size", "16", "--max_epochs", "1",
            "--learning_rate", "DPO_LR", "--beta", "0.1", "--logging_steps", "10"]


def kto_flags() -> list[str]:
    d = tiny_dir() / "unpaired"
    return ["--dataset", f"json@{d}", "--eval_dataset", f"json@{d}", "--input_key", "input", "--output_key", "output",
            "--label_key", "label", "--apply_chat_template", "--max_len", "64", "--packing_samples",
            "--zero_stage", "2", "--seed", "42", "--train_batch_size", "32", "--micro_train_batch_size", "16",
            "--max_epochs", "1", "--learning_rate", "KTO_LR", "--beta", "0.1", "--logging_steps", "10"]
