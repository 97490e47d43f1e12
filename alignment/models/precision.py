"""What --bf16 and --flash_attn mean on this hardware, decided once and logged once."""

from __future__ import annotations

import functools
import importlib.util
import logging
from dataclasses import dataclass

import torch

from alignment.config.engine_knobs import EngineKnobs
from alignment.models.loading import ModelLoadError

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
    dtype: torch.dtype  # dtype of weights and math
    bf16: bool  # whether DeepSpeed runs in bf16 mode
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
    return Precision(
        torch.float32,
        False,
        "--bf16 requested but this CPU has no native bf16 (no AVX512-BF16/AMX; bf16 matmuls "
        "are ~500x slower than fp32 here): computing in fp32 instead",
    )


@functools.lru_cache(maxsize=None)
def _log_once(message: str, level: int = logging.WARNING) -> None:
    log.log(level, message)


def precision_for(bf16: bool, device: str) -> Precision:
    """--bf16's outcome is logged once either way: a warning when it falls back to fp32."""
    p = resolve_precision(bf16, device)
    if bf16:
        _log_once(p.reason, logging.INFO if p.bf16 else logging.WARNING)
    return p


def attn_implementation(requested: str, device: str) -> str:
    """The kernel requested (ModelConfig.attention()): flash_attention_2 where usable, else SDPA (logged once)."""
    if requested != "flash_attention_2":
        return requested
    if device == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    why = "no CUDA device" if device != "cuda" else "the flash-attn package is not installed"
    _log_once(f"--flash_attn requested but {why}: using PyTorch SDPA attention instead")
    return "sdpa"


def check_ring_attention(ring_attn_size: int, device: str) -> None:
    """--ring_attn_size > 1 is refused in one line: where the kernels can't run (no CUDA, no
    ring-flash-attn) it says so; where they could, that alignflow has not built the sequence-
    parallel path yet. Either way the long-sequence route that works is --packing_samples."""
    if ring_attn_size <= 1:
        return
    if device != "cuda" or importlib.util.find_spec("ring_flash_attn") is None:
        why = "no CUDA device" if device != "cuda" else "the ring-flash-attn package is not installed"
        raise ModelLoadError(
            f"--ring_attn_size {ring_attn_size}: ring attention needs CUDA GPUs with flash-attn and "
            f"ring-flash-attn ({why} here); drop the flag and use --packing_samples for long data"
        )
    raise ModelLoadError(
        f"--ring_attn_size {ring_attn_size}: ring attention (sequence parallelism) is not implemented "
        f"in alignflow yet; drop the flag and use --packing_samples for long data"
    )


def check_cuda_knobs(ds: EngineKnobs, device: str) -> None:
    """--deepcompile and --use_liger_kernel compile or swap in GPU kernels: refused in one line where there is
    no CUDA device (or, for Liger, no liger-kernel package), before any weights load."""
    for flag, wanted, package in (
        ("--deepcompile", ds.deepcompile, None),
        ("--use_liger_kernel", ds.use_liger_kernel, "liger_kernel"),
    ):
        if not wanted:
            continue
        if device != "cuda":
            raise ModelLoadError(f"{flag}: needs CUDA GPUs (no CUDA device here); drop the flag")
        if package and importlib.util.find_spec(package) is None:
            raise ModelLoadError(f"{flag}: needs the liger-kernel package (pip install liger-kernel); drop the flag")


def apply_liger(model: torch.nn.Module) -> torch.nn.Module:
    """--use_liger_kernel (CUDA, checked by check_cuda_knobs): Liger's kernels patched into this model's layers."""
    from liger_kernel.transformers import _apply_liger_kernel_to_instance

    _apply_liger_kernel_to_instance(model=model)
    return model
