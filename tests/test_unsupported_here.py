"""Flags this CPU machine can't honour: each CLI refuses them with exactly one `error:` line that
names the flag and what to do instead, exit status 2, no traceback, before any weights load.
(Flags that degrade instead — --flash_attn to SDPA, --bf16 to fp32 on CPUs without native bf16 —
log once and run: tests/test_sft_integration.py, tests/test_precision.py.)"""

from __future__ import annotations

import pytest

from alignment.tiny_world.paths import tiny_dir
from tests.conftest import REPO, run_module

pytestmark = pytest.mark.integration

PPO = [
    "--prompt_data",
    f"json@{tiny_dir() / 'prompts'}",
    "--input_key",
    "context_messages",
    "--apply_chat_template",
    "--remote_rm_url",
    str(REPO / "alignment/tiny_world/reward.py"),
    "--label_key",
    "label",
]
PAIRS = ["--dataset", f"json@{tiny_dir() / 'preference'}", "--prompt_key", "prompt", "--apply_chat_template"]


@pytest.mark.parametrize(
    "module, args, needle",
    [
        (
            "alignment.cli.train_ppo",
            [*PPO, "--ring_attn_size", "2"],
            "--ring_attn_size 2: ring attention needs CUDA GPUs with flash-attn and ring-flash-attn "
            "(no CUDA device here)",
        ),
        (
            "alignment.cli.train_ppo",
            [*PPO, "--load_in_4bit", "--lora_rank", "8"],
            "--load_in_4bit needs a CUDA GPU and the bitsandbytes package",
        ),
        (
            "alignment.cli.train_ppo",
            [*PPO, "--vllm_num_engines", "1"],
            "vLLM engines run with alignment.cli.train_ppo_ray",
        ),
        ("alignment.cli.train_dpo", [*PAIRS, "--ring_attn_size", "4"], "--ring_attn_size 4: ring attention needs CUDA"),
        ("alignment.cli.train_rm", [*PAIRS, "--load_in_4bit", "--lora_rank", "8"], "--load_in_4bit needs a CUDA GPU"),
        ("alignment.cli.interactive_chat", ["--load_in_4bit"], "--load_in_4bit needs a CUDA GPU"),
        # later OpenRLHF flags that are not built: one line saying what to use instead, never accepted and ignored
        (
            "alignment.cli.train_sft",
            ["--dataset", "x.jsonl", "--vllm_enable_sleep"],
            "--vllm_enable_sleep: vLLM sleep mode applies to the rollout engines of train_ppo_ray only",
        ),
        (
            "alignment.cli.train_sft",
            ["--dataset", "x.jsonl", "--use_dynamic_batch"],
            "--use_dynamic_batch: token-budget micro-batches are built for the PPO family",
        ),
        (
            "alignment.cli.train_ppo_ray",
            [*PPO, "--data.max_images_per_prompt", "1", "--data.image_key", "images"],
            "--max_images_per_prompt 1 with --advantage_estimator gae: a critic is not built for vision-language "
            "models",
        ),
        (
            "alignment.cli.train_ppo_ray",
            [*PPO, "--rollout_max_tokens_per_gpu", "4096"],
            "--rollout_max_tokens_per_gpu is set but --use_dynamic_batch is not",
        ),
        (
            "alignment.cli.train_ppo_ray",
            [*PPO, "--async_train"],
            "--async_train overlaps generation on the vLLM engines with training on the actor: "
            "add --vllm_num_engines 1",
        ),
        (
            "alignment.cli.train_ppo_ray",
            [*PPO, "--pretrain_data", "x.jsonl", "--ptx_coef", "0.05"],
            "--pretrain_data: the pre-training (PTX) loss inside PPO is not built",
        ),
    ],
)
def test_unsupported_here_is_one_clear_line(tiny_base, tmp_path, module, args, needle):
    writes = [] if module.endswith("interactive_chat") else ["--save_path", str(tmp_path / "out")]
    proc = run_module(module, ["--pretrain", str(tiny_base), *writes, *args], check=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 2 and len(errors) == 1 and needle in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()
