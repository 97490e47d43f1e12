"""LoRA through the SFT CLI: adapters merged on save, or saved alone (as OpenRLHF and TRL save them) and loaded
by every later stage given that folder."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tests.sft_cli import TINY_SFT, run_cli

pytestmark = pytest.mark.integration


def test_lora_bf16_checkpointing_tracking(tiny_base, tmp_path):
    """LoRA adapters merged on save (--merge_lora), the adapter beside; --bf16 means bf16 where this CPU
    has native bf16 and fp32 (logged once) where it hasn't; wandb offline + TensorBoard write their files; the wandb key
    is never printed or saved."""
    from transformers import AutoModelForCausalLM

    from alignment.models.precision import cpu_has_native_bf16

    out, key = tmp_path / "lora", "planted-wandb-key-9f3c"
    wandb_dirs = {
        k: str(tmp_path / "wandb") for k in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR")
    }
    proc = run_cli(
        [
            "--pretrain",
            str(tiny_base),
            "--save_path",
            str(out),
            "--max_steps",
            "4",
            "--lora_rank",
            "8",
            "--lora_alpha",
            "16",
            "--target_modules",
            "q_proj,v_proj",
            "--learning_rate",
            "1e-2",
            "--merge_lora",
            "--bf16",
            "--gradient_checkpointing",
            "--use_wandb",
            key,
            "--use_tensorboard",
            str(tmp_path / "tb"),
            *TINY_SFT,
        ],
        env={"WANDB_MODE": "offline", **wandb_dirs},
    )
    if cpu_has_native_bf16():
        assert "bf16 on a CPU with native bf16" in proc.stderr and "no native bf16" not in proc.stderr
    else:
        assert proc.stderr.count("no native bf16") == 1
    assert key not in proc.stdout + proc.stderr
    assert key not in (out / "MANIFEST.json").read_text()
    recorded = [p for p in (tmp_path / "wandb").rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert not recorded, recorded  # wandb records the command line: the key was scrubbed from it
    assert any((tmp_path / "tb").rglob("events.out.tfevents*")) and any((tmp_path / "wandb").rglob("*.wandb"))
    state = load_file(out / "model.safetensors")
    assert not any("lora" in k for k in state)
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())  # the adapter, as PEFT saves it
    assert adapter["r"] == 8 and sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    assert (out / "adapter" / "adapter_model.safetensors").exists()
    merged = AutoModelForCausalLM.from_pretrained(out).state_dict()
    base = AutoModelForCausalLM.from_pretrained(tiny_base).state_dict()
    same = lambda k: torch.equal(merged[k], base[k].to(merged[k].dtype))  # noqa: E731 (saved in the training dtype)
    assert not same("model.layers.0.self_attn.q_proj.weight")  # adapters really merged in
    assert same("model.layers.0.self_attn.k_proj.weight")  # untargeted weights untouched


def test_lora_saves_the_adapter_and_every_stage_loads_it(tiny_base, tmp_path, monkeypatch):
    """Without --merge_lora the output is the PEFT adapter alone (as OpenRLHF and TRL save it), naming
    its base as given; a later stage given that folder as --pretrain loads base + adapter merged (built
    once per node into the cache), equal to PEFT's own PeftModel.from_pretrained(base, adapter)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from alignment.models.loading import resolve_model_path

    monkeypatch.setenv("ALIGNFLOW_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "adapter"
    run_cli(
        [
            "--pretrain",
            str(tiny_base),
            "--save_path",
            str(out),
            "--max_steps",
            "3",
            "--lora_rank",
            "8",
            "--target_modules",
            "q_proj,v_proj",
            "--learning_rate",
            "1e-2",
            *TINY_SFT,
        ],
        env={"ALIGNFLOW_CACHE": str(tmp_path / "cache")},
    )
    files = sorted(p.name for p in out.iterdir())
    assert "adapter_model.safetensors" in files and "config.json" not in files and "model.safetensors" not in files
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_base)
    merged = resolve_model_path(str(out))
    assert resolve_model_path(str(out)) == merged and merged.startswith(str(tmp_path / "cache"))  # built once
    ids = torch.tensor([[5, 17, 42, 9, 3]])
    peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_base), str(out)).eval()
    with torch.no_grad():
        want, got = peft(ids).logits, AutoModelForCausalLM.from_pretrained(merged)(ids).logits
    assert torch.allclose(want, got, atol=1e-5) and not torch.allclose(
        AutoModelForCausalLM.from_pretrained(tiny_base)(ids).logits, got, atol=1e-3
    )
    # a next stage from the adapter folder: it trains on the merged model and commits a plain model
    run_cli(
        ["--pretrain", str(out), "--save_path", str(tmp_path / "next"), "--max_steps", "1", *TINY_SFT],
        env={"ALIGNFLOW_CACHE": str(tmp_path / "cache")},
    )
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "next").config.model_type == "llama"
