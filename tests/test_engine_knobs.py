"""OpenRLHF v0.11's DeepSpeed, optimizer and data knobs: each reaches what it sets (DeepSpeed's config, the
optimizer, the RNG setup) or is refused in one line where this machine lacks what it needs."""

from __future__ import annotations

import pytest
import torch

from alignment.config import ConfigError, PPOConfig, SFTConfig, parse_args
from alignment.distributed.deepspeed_config import train_ds_config
from alignment.models.loading import ModelLoadError
from alignment.models.precision import check_cuda_knobs
from alignment.training.engine import make_optimizer

SFT = ["--model.model_name_or_path", "m", "--data.dataset", "d"]


def test_deepspeed_knobs_reach_deepspeeds_config():
    cfg = parse_args(
        SFTConfig,
        [*SFT, "--ds.zero_stage", "2", "--ds.overlap_comm", "--ds.grad_accum_dtype", "fp32", "--ds.use_universal_ckpt"],
    )
    ds = train_ds_config(cfg, 1, False, "cpu")
    assert ds["zero_optimization"]["overlap_comm"] is True
    assert ds["data_types"] == {"grad_accum_dtype": "fp32"} and ds["checkpoint"] == {"load_universal": True}
    plain = train_ds_config(parse_args(SFTConfig, SFT), 1, False, "cpu")
    assert "data_types" not in plain and "checkpoint" not in plain and "overlap_comm" not in plain["zero_optimization"]


def test_tensor_parallel_size_reaches_deepspeeds_autotp():
    """--ds.tensor_parallel_size 2 on 4 ranks: 2 data-parallel replicas; DeepSpeed counts the batch over all 4."""
    cfg = parse_args(SFTConfig, [*SFT, "--ds.tensor_parallel_size", "2", "--train_batch_size", "16",
                                 "--micro_train_batch_size", "4"])  # fmt: skip
    ds = train_ds_config(cfg, 2, False, "cpu", tp=2)
    assert ds["tensor_parallel"] == {"autotp_size": 2, "vocab_parallel_lm_head": False}
    assert (ds["train_batch_size"], ds["gradient_accumulation_steps"]) == (32, 2)  # 32 = 4 x 2 x 4 ranks
    assert "tensor_parallel" not in train_ds_config(cfg, 2, False, "cpu")
    with pytest.raises(ConfigError, match="--ds_tensor_parallel_size shards it: use --ds_tensor_parallel_size 1"):
        parse_args(PPOConfig, ["--actor.model_name_or_path", "m", "--data.prompt_dataset", "p", "--reward.remote_url",
                               "r.py", "--ds.tensor_parallel_size", "2", "--enable_ema"])  # fmt: skip


def test_a_tensor_parallel_size_that_does_not_divide_the_ranks_is_one_line():
    from alignment.distributed.runtime import Runtime

    rt = Runtime(rank=3, world_size=4, local_rank=3, local_world_size=4, device="cpu").tensor_parallel(2)
    assert (rt.dp_rank, rt.dp_size) == (1, 2)
    with pytest.raises(ConfigError, match="--ds_tensor_parallel_size 3 does not divide the world size 4"):
        rt.tensor_parallel(3)


def test_adam_eps_and_muon_momentum_reach_the_optimizer():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    named = [(f"model.layers.{n}", p) for n, p in model.named_parameters()]
    cfg = parse_args(SFTConfig, [*SFT, "--adam.eps", "1e-5"])
    adam = make_optimizer(named, cfg, "cpu", cfg.adam.lr)
    assert adam.param_groups[0]["eps"] == 1e-5
    ppo = parse_args(PPOConfig, ["--actor.model_name_or_path", "m", "--data.prompt_dataset", "p", "--reward.remote_url",
                                 "r.py", "--actor.adam.eps", "1e-6", "--critic.adam.eps", "1e-6"])  # fmt: skip
    assert ppo.adam_eps == 1e-6  # one value for actor and critic, given the same under both names


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--muon.ns_steps", "3"], "DeepSpeed's Muon always runs 5 Newton-Schulz steps"),
        (["--muon.no_nesterov"], "DeepSpeed's Muon always runs 5 Newton-Schulz steps"),
        (["--ds.tensor_parallel_size", "0"], "--ds_tensor_parallel_size 0: must be >= 1"),
        (["--ds.tensor_parallel_size", "2", "--zero_stage", "3"], "DeepSpeed's AutoTP trains under ZeRO 0-2"),
        (["--ds.tensor_parallel_size", "2", "--lora_rank", "4"], "AutoTP does not shard PEFT's LoRA layers"),
        (["--muon.momentum", "0.9"], "--muon_momentum sets the Muon half of --optim muon"),
        (["--use_ms"], "--use_ms needs the modelscope package"),
    ],
)
def test_knobs_that_cannot_apply_are_one_line(flags, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_args(SFTConfig, [*SFT, *flags])


@pytest.mark.parametrize("flag", ["deepcompile", "use_liger_kernel"])
def test_gpu_only_knobs_are_refused_without_cuda(flag):
    cfg = parse_args(SFTConfig, [*SFT, f"--ds.{flag}"])
    with pytest.raises(ModelLoadError, match=f"--{flag}: needs CUDA GPUs"):
        check_cuda_knobs(cfg.ds, "cpu")


def test_experts_implementation_reaches_a_mixture_of_experts_model():
    import json

    from transformers import AutoModelForCausalLM, MixtralConfig

    from alignment.models.builder import set_experts
    from alignment.tiny_world.paths import tiny_dir

    c = json.loads((tiny_dir() / "mixtral_config.json").read_text())
    model = AutoModelForCausalLM.from_config(MixtralConfig(**{k: v for k, v in c.items() if k != "architectures"}))
    set_experts(model, "eager")
    assert model.config._experts_implementation_internal == "eager"
    assert (
        parse_args(SFTConfig, [*SFT, "--ds.experts_implementation", "grouped_mm"]).ds.experts_implementation
        == "grouped_mm"
    )
