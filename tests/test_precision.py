"""What --bf16 and --flash_attn mean on this hardware."""

import logging

import torch

from alignment.models import precision as P


def test_bf16_on_cpu_without_native_support_computes_fp32():
    p = P.resolve_precision(True, "cpu", native_cpu_bf16=False)
    assert p.dtype == torch.float32 and not p.bf16 and "fp32" in p.reason


def test_bf16_kept_where_native():
    assert P.resolve_precision(True, "cpu", native_cpu_bf16=True).dtype == torch.bfloat16
    assert P.resolve_precision(True, "cuda").bf16
    assert P.resolve_precision(False, "cuda").dtype == torch.float32


def test_cpuinfo_flags(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("flags\t\t: fpu sse avx2\n")
    assert not P.cpu_has_native_bf16(str(f))
    f.write_text("flags\t\t: fpu avx512f avx512_bf16\n")
    assert P.cpu_has_native_bf16(str(f))


def test_flash_attn_falls_back_to_sdpa_and_logs_once(caplog):
    P._log_once.cache_clear()
    with caplog.at_level(logging.WARNING):
        assert P.attn_implementation("flash_attention_2", "cpu") == "sdpa"
        assert P.attn_implementation("flash_attention_2", "cpu") == "sdpa"
    assert caplog.text.count("using PyTorch SDPA") == 1
    assert P.attn_implementation("sdpa", "cpu") == "sdpa"


def test_cuda_arch_list_as_deepspeed_parses_it():
    """DeepSpeed 0.19.8 reads TORCH_CUDA_ARCH_LIST entries as int.int: Hopper's `9.0a` (set by a lent H100's
    image, 2026-11-27) made FusedAdam's JIT build fail; the suffix is dropped, `+PTX` kept."""
    from alignment.training.engine import deepspeed_arch_list

    assert deepspeed_arch_list("9.0a") == "9.0"
    assert deepspeed_arch_list("8.0;9.0a+PTX 10.0a") == "8.0;9.0+PTX 10.0"
    assert deepspeed_arch_list("7.5 8.6+PTX") == "7.5 8.6+PTX"
