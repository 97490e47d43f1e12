"""Policy weights from the trainer to a rollout engine in bounded chunks, never one giant blob.

The trainer side splits the (gathered) state dict into chunks of at most `max_bytes` each (a
tensor larger than that travels alone); on Ray each chunk is its own object in the object store,
so neither side ever holds more than the model plus one chunk in flight. The engine side writes
each chunk as one safetensors shard (plus the index HF loaders read) and the engine reloads from
that directory — the path vLLM-CPU supports (its prepacked fp32 linear layers refuse plain
`load_weights`; `reload_weights` works: tests/test_weight_sync.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Iterator

import torch
from safetensors.torch import save_file

DEFAULT_CHUNK_BYTES = 64 << 20


def chunks(state: dict[str, torch.Tensor], max_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[dict[str, torch.Tensor]]:
    """Consecutive groups of tensors, each group at most `max_bytes` (unless one tensor is bigger)."""
    if max_bytes <= 0:
        raise ValueError(f"weight sync chunk size must be > 0 bytes, got {max_bytes}")
    part: dict[str, torch.Tensor] = {}
    size = 0
    for name, tensor in state.items():
        n = tensor.numel() * tensor.element_size()
        if part and size + n > max_bytes:
            yield part
            part, size = {}, 0
        part[name] = tensor.detach().contiguous()
        size += n
    if part:
        yield part


def write_shards(parts: Iterable[dict[str, torch.Tensor]], directory: Path) -> int:
    """Write chunks as `model-0000k.safetensors` + `model.safetensors.index.json`; returns the count."""

    directory.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    names = []
    for k, part in enumerate(parts):
        name = f"model-{k + 1:05d}.safetensors"
        save_file(part, str(directory / name))  # one chunk in memory at a time
        weight_map.update({t: name for t in part})
        names.append(name)
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return len(names)
