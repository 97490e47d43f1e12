"""Our side of a comparison run: the CLI command line for a RunSpec, and its step timings.

Every stage logs a metrics.jsonl row per optimizer step (`--logging_steps 1`) with the wall
clock `time` at the end of that step, which is what TRL's side records with a callback.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.compare.spec import RunSpec

REWARD_FILE = "alignment/tiny_world/reward.py"
MODULES = {
    "sft": "alignment.cli.train_sft",
    "rm": "alignment.cli.train_rm",
    "dpo": "alignment.cli.train_dpo",
    "rloo": "alignment.cli.train_ppo",
    "grpo": "alignment.cli.train_ppo",
}
ESTIMATOR = {"rloo": "rloo", "grpo": "group_norm"}  # GRPO's advantage = group-normalised reward


def _optim(spec: RunSpec) -> list[str]:
    """Equal to TRL's TrainingArguments in trl_runner.common_args. No --zero_stage: one rank runs stage 0,
    the default a user gets (TRL's Trainer in one process has no ZeRO either)."""
    return [
        "--lr_scheduler",
        "constant",
        "--lr_warmup_ratio",
        "0",
        "--adam_betas",
        "0.9",
        "0.95",
        "--l2",
        "0",
        "--max_norm",
        "1.0",
        "--num_threads",
        str(spec.threads),
        "--seed",
        str(spec.seed),
        "--logging_steps",
        "1",
        "--disable_ds_ckpt",
        "--save_path",
        f"{spec.out_dir}/model",
        "--ckpt_path",
        f"{spec.out_dir}/ckpt",
        "--pretrain",
        spec.model,
        *(["--bf16"] if spec.bf16 else []),
    ]


def sft_flags(spec: RunSpec) -> list[str]:
    return [
        "--dataset",
        f"json@{spec.data}",
        "--input_key",
        "context_messages",
        "--apply_chat_template",
        "--multiturn",
        "--max_len",
        str(spec.max_len),
        "--packing_samples",
        "--train_batch_size",
        str(spec.batch),
        "--micro_train_batch_size",
        str(spec.micro),
        "--max_epochs",
        "1000",
        "--max_steps",
        str(spec.steps),
        "--learning_rate",
        str(spec.lr),
        *_optim(spec),
    ]


def stage_args(spec: RunSpec, vllm: bool = False, overlap: bool = False) -> list[str]:
    """Arguments of `python -m MODULES[spec.kind]` (or train_ppo_ray with one vLLM engine; `overlap`:
    with --async_train, the next iteration generated while this one trains)."""
    if spec.kind == "sft":
        return sft_flags(spec)
    if spec.kind in ("rm", "dpo"):
        return preference_flags(spec)
    args = rl_flags(spec)
    if vllm:  # the engine on its own bundle (a core); actor + reference share the other (the driver pins them)
        args += ["--vllm_num_engines", "1", "--colocate_actor_ref", *(["--async_train"] if overlap else [])]
    return args


def preference_flags(spec: RunSpec) -> list[str]:
    extra = ["--beta", str(spec.beta)] if spec.kind == "dpo" else []
    return [
        "--dataset",
        f"json@{spec.data}",
        "--prompt_key",
        "prompt",
        "--apply_chat_template",
        "--max_len",
        str(spec.max_len),
        "--packing_samples",
        "--train_batch_size",
        str(spec.batch),
        "--micro_train_batch_size",
        str(spec.micro),
        "--max_epochs",
        "1000",
        "--max_steps",
        str(spec.steps),
        "--learning_rate",
        str(spec.lr),
        *extra,
        *_optim(spec),
    ]


def rl_flags(spec: RunSpec) -> list[str]:
    """The RL workloads (GRPO, RLOO, ...): the rule reward, one optimizer step an iteration."""
    prompts = spec.prompts_per_iteration
    return [
        "--prompt_data",
        f"json@{spec.data}",
        "--input_key",
        "context_messages",
        "--label_key",
        "label",
        "--apply_chat_template",
        "--generate_max_len",
        str(spec.gen_len),
        "--advantage_estimator",
        ESTIMATOR[spec.kind],
        "--n_samples_per_prompt",
        str(spec.n_samples),
        "--rollout_batch_size",
        str(prompts),
        "--micro_rollout_batch_size",
        str(spec.batch),
        "--train_batch_size",
        str(spec.batch),
        "--micro_train_batch_size",
        str(spec.micro),
        "--actor_learning_rate",
        str(spec.lr),
        "--init_kl_coef",
        "0",
        "--temperature",
        "1.0",
        "--top_p",
        "1.0",
        "--max_samples",
        str(prompts * spec.steps),
        "--num_episodes",
        "1",
        "--remote_rm_url",
        REWARD_FILE,
        "--packing_samples",
        *_optim(spec),
    ]


def command(python: str, spec: RunSpec, vllm: bool = False, overlap: bool = False) -> list[str]:
    module = "alignment.cli.train_ppo_ray" if vllm else MODULES[spec.kind]
    return [python, "-m", module, *stage_args(spec, vllm, overlap)]


def step_times(spec: RunSpec) -> list[float]:
    """End time of each optimizer step (RL: iteration), from the run's metrics.jsonl."""
    path = Path(spec.out_dir) / "model" / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["time"] for r in rows if any(k.startswith("train/") for k in r)]


def cuda_peak_gib(spec: RunSpec) -> float | None:
    """The run's peak CUDA memory held by tensors (the MANIFEST's final metrics; None on CPU)."""
    path = Path(spec.out_dir) / "model" / "MANIFEST.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())["metadata"]["final_metrics"].get("mem/cuda_peak_gib")


def sft_tokens_per_step(spec: RunSpec) -> list[int]:
    """Tokens of each optimizer step of our SFT run: the CLI's own data pipeline and seeded sampler,
    replayed (our trainer does not log token counts)."""
    from alignment.config import SFTConfig, parse_args
    from alignment.datasets.sft import SFTTokenizer
    from alignment.datasets.tokenized import load_train_eval
    from alignment.models.loading import load_tokenizer
    from alignment.training.sampler import micro_batches

    cfg = parse_args(SFTConfig, sft_flags(spec), prog="bench")
    tok = load_tokenizer(spec.model)
    train, _ = load_train_eval(cfg, lambda src: SFTTokenizer(tok, cfg, src))
    per_epoch = len(train) // spec.batch * spec.accum
    tokens, epoch = [], 0
    while len(tokens) < spec.steps:
        batches = micro_batches(len(train), spec.micro, 0, 1, cfg.train.seed, epoch)[:per_epoch]
        for s in range(0, len(batches), spec.accum):
            tokens.append(sum(len(train[i].input_ids) for mb in batches[s : s + spec.accum] for i in mb))
        epoch += 1
    return tokens[: spec.steps]
