"""What --bf16 and --flash_attn mean on this hardware, decided once and logged once."""
from __future__ import annotations

import functools
import importlib.util
import logging
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)


def cpu_has_native_bf16(cpuinfo_path: str = "/proc/cpuinfo") -> bool:
    """AVX512-BF16 or AMX: without them bf16 matmuls on CPU are ~500x slower than fp32."""
    try:
        with open(cpuinfo_path) as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return False
    return any(flag in flags.split() for flag in ("avx512_bf16", "amx_bf16"))


@dataclass(frozen=True)
class Precision:
    dtype: torch.dtype   # dtype of weights and math
    bf16: bool           # whether DeepSpeed runs in bf16 mode
    reason: str

    @property
    def label(self) -> str:
        """Short name for summary lines (the long reason is logged once, by precision_for)."""
        return "bf16" if self.bf16 else ("fp32" if self.dtype == torch.float32 else str(self.dtype))


def resolve_precision(bf16: bool, device: str, native_cpu_bf16: bool | None = None) -> Precision:
    if not bf16:
        return Precision(torch.float32, False, "fp32 (no --bf16)")
    if device == "cuda":
        return Precision(torch.bfloat16, True, "bf16 on CUDA")
    native = cpu_has_native_bf16() if native_cpu_bf16 is None else native_cpu_bf16
    if native:
        return Precision(torch.bfloat16, True, "bf16 on a CPU with native bf16")
    return Precision(torch.float32, False,
                     "--bf16 requested but this CPU has no native bf16 (no AVX512-BF16/AMX; bf16 matmuls "
                     "are ~500x slower than fp32 here): computing in fp32 instead")


@functools.lru_cache(maxsize=None)
def _log_once(message: str) -> None:
    log.warning(message)


def precision_for(bf16: bool, device: str) -> Precision:
    p = resolve_precision(bf16, device)
    if bf16 and not p.bf16:
        _log_once(p.reason)
    return p


def attn_implementation(flash_attn: bool, device: str) -> str:
    """flash_attention_2 where requested and usable; SDPA otherwise (logged once)."""
    if not flash_attn:
        return "sdpa"
    if device == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    why = "no CUDA device" if device != "cuda" else "the flash-attn package is not installed"
    _log_once(f"--flash_attn requested but {why}: using PyTorch SDPA attention instead")
    return "sdpa"
