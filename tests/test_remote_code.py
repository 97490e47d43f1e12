"""--trust_remote_code: a model folder that ships its own architecture code (auto_map) is refused in
one line without the flag, and trains and saves with it (SFT, a few steps)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from alignment.tiny_world.paths import tiny_dir
from tests.conftest import run_module

pytestmark = pytest.mark.integration

CODE = '''
from transformers import LlamaConfig, LlamaForCausalLM


class TinyCustomConfig(LlamaConfig):
    model_type = "tinycustom"


class TinyCustomForCausalLM(LlamaForCausalLM):
    config_class = TinyCustomConfig
'''


def custom_model(tiny_base: Path, root: Path) -> Path:
    """The tiny base re-labelled as an architecture transformers does not know: its code is in the folder."""
    out = root / "custom"
    shutil.copytree(tiny_base, out, ignore=shutil.ignore_patterns("MANIFEST.json"))
    (out / "modeling_tinycustom.py").write_text(CODE)
    config = json.loads((out / "config.json").read_text())
    config.update(
        model_type="tinycustom",
        architectures=["TinyCustomForCausalLM"],
        auto_map={
            "AutoConfig": "modeling_tinycustom.TinyCustomConfig",
            "AutoModelForCausalLM": "modeling_tinycustom.TinyCustomForCausalLM",
        },
    )
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_custom_code_needs_trust_remote_code(tiny_base, tmp_path):
    model = custom_model(tiny_base, tmp_path)
    args = [
        "--pretrain",
        str(model),
        "--dataset",
        f"json@{tiny_dir() / 'sft'}",
        "--input_key",
        "context_messages",
        "--apply_chat_template",
        "--multiturn",
        "--max_len",
        "64",
        "--train_batch_size",
        "8",
        "--micro_train_batch_size",
        "8",
        "--max_steps",
        "2",
        "--save_path",
        str(tmp_path / "out"),
    ]
    refused = run_module("alignment.cli.train_sft", args, check=False)
    errors = [ln for ln in refused.stderr.splitlines() if ln.startswith("error: ")]
    assert refused.returncode == 2 and len(errors) == 1 and "pass --trust_remote_code" in errors[0], refused.stderr[
        -2000:
    ]
    run_module("alignment.cli.train_sft", [*args, "--trust_remote_code"])
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert saved["model_type"] == "tinycustom" and (tmp_path / "out" / "MANIFEST.json").exists()
