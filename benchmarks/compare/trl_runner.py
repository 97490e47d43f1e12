"""The TRL side of a comparison run: `python trl_runner.py SPEC.json RESULT.json`.

Runs one of TRL 1.16's SFTTrainer (packing), RewardTrainer, DPOTrainer, RLOOTrainer or
GRPOTrainer on the RunSpec's model, data and hyper-parameters, and writes the end time of every
optimizer step (and, for SFT, the tokens of every batch) to RESULT.json. Uses the same data
files and tokenizer as our CLIs, the chat template applied by TRL itself.
Runs in whichever venv has TRL (the project venv, since TRL 1.16 shares its transformers).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
STARTED = time.time()
sys.path.insert(0, str(Path(__file__).resolve().parent))
from spec import RunSpec  # noqa: E402


def rows(data_dir: str) -> list[dict]:
    return [json.loads(line) for line in (Path(data_dir) / "train.jsonl").read_text().splitlines() if line.strip()]


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def assistant(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


def dataset(spec: RunSpec):
    """Conversational TRL rows from the files our CLIs read (same prompts, same answers)."""
    from datasets import Dataset

    data = rows(spec.data)
    if spec.kind == "sft":  # our --multiturn loss on assistant turns == TRL's completion-only loss
        items = [{"prompt": r["context_messages"][:-1], "completion": r["context_messages"][-1:]} for r in data]
    elif spec.kind in ("rm", "dpo"):
        items = [
            {"prompt": user(r["prompt"]), "chosen": assistant(r["chosen"]), "rejected": assistant(r["rejected"])}
            for r in data
        ]
    else:
        items = [{"prompt": r["context_messages"], "label": r["label"]} for r in data]
    return Dataset.from_list(items)


def rule_reward(completions: list, label: list, **_) -> list[float]:
    """Our tiny-world rule reward (alignment/tiny_world/reward.py), inlined so this file runs in any venv:
    1.0 when the completion's last integer before the turn end equals the label."""
    import re

    out = []
    for completion, want in zip(completions, label):
        text = completion[0]["content"] if isinstance(completion, list) else completion
        found = re.findall(r"-?\d+", text.split("<|end|>", 1)[0])
        out.append(1.0 if found and int(found[-1]) == int(want) else 0.0)
    return out


def common_args(spec: RunSpec) -> dict:
    """TrainingArguments equal to our flags: constant lr (no warm-up), AdamW betas (0.9, 0.95), no weight
    decay, clip 1.0, fp32 (spec.bf16: bf16 autocast over fp32 weights), no checkpointing / eval / saving, a log
    row per step; on the CPU, or on the GPU when spec.device is "cuda"."""
    return dict(
        output_dir=spec.out_dir,
        per_device_train_batch_size=spec.micro,
        gradient_accumulation_steps=spec.accum,
        learning_rate=spec.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=0.9,
        adam_beta2=0.95,
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=spec.steps,
        logging_steps=1,
        save_strategy="no",
        eval_strategy="no",
        report_to="none",
        bf16=spec.bf16,
        fp16=False,
        gradient_checkpointing=False,
        seed=spec.seed,
        use_cpu=spec.device == "cpu",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )


class CountingCollator:
    """Wraps a collator and records the real (non-pad) tokens of every batch it builds."""

    def __init__(self, inner):
        self.inner, self.tokens = inner, []

    def __call__(self, features):
        batch = self.inner(features)
        mask = batch.get("attention_mask")
        self.tokens.append(int(mask.sum()) if mask is not None else int(batch["input_ids"].numel()))
        return batch


def build(spec: RunSpec):
    import torch
    import trl
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(spec.model)
    lm = lambda: AutoModelForCausalLM.from_pretrained(spec.model, dtype=torch.float32, attn_implementation="sdpa")  # noqa: E731
    train = dataset(spec)
    base = common_args(spec)
    if spec.kind == "sft":
        # packed rows of max_len tokens (~2 samples each), flattened padding-free: batch/2 rows ~ our batch
        args = trl.SFTConfig(
            **{**base, "per_device_train_batch_size": max(1, spec.micro // 2)}, max_length=spec.max_len, packing=True
        )
        return trl.SFTTrainer(model=lm(), args=args, train_dataset=train, processing_class=tok)
    if spec.kind == "rm":
        model = AutoModelForSequenceClassification.from_pretrained(
            spec.model, num_labels=1, dtype=torch.float32, attn_implementation="sdpa"
        )
        model.config.pad_token_id = tok.pad_token_id
        return trl.RewardTrainer(
            model=model,
            args=trl.RewardConfig(**base, max_length=spec.max_len),
            train_dataset=train,
            processing_class=tok,
        )
    if spec.kind == "dpo":
        # a frozen reference forward every step, as ours (no precomputed reference log-probs)
        args = trl.DPOConfig(
            **base, max_length=spec.max_len, beta=spec.beta, loss_type=["sigmoid"], precompute_ref_log_probs=False
        )
        return trl.DPOTrainer(model=lm(), ref_model=lm(), args=args, train_dataset=train, processing_class=tok)
    config_cls, trainer_cls = {"grpo": (trl.GRPOConfig, trl.GRPOTrainer), "rloo": (trl.RLOOConfig, trl.RLOOTrainer)}[
        spec.kind
    ]
    # one generation of batch completions (batch / n prompts) per optimizer step; beta 0: no reference model,
    # as our --init_kl_coef 0
    args = config_cls(
        **base,
        num_generations=spec.n_samples,
        max_completion_length=spec.gen_len,
        temperature=1.0,
        top_p=1.0,
        beta=0.0,
        num_iterations=1,
        log_completions=False,
    )
    return trainer_cls(model=lm(), reward_funcs=rule_reward, args=args, train_dataset=train, processing_class=tok)


def main() -> None:
    spec, result_path = RunSpec.load(sys.argv[1]), Path(sys.argv[2])
    import torch
    import transformers
    import trl
    from transformers import TrainerCallback

    if spec.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: the spec says device cuda, but torch sees no CUDA device")
    torch.set_num_threads(spec.threads)
    torch.manual_seed(spec.seed)
    trainer = build(spec)
    counter = None
    if spec.kind == "sft":
        counter = trainer.data_collator = CountingCollator(trainer.data_collator)
    step_times: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if spec.device == "cuda":  # the step's kernels done, as ours (its per-step metrics are read back)
                torch.cuda.synchronize()
            step_times.append(time.time())

    trainer.add_callback(StepClock())
    loop_start = time.time()
    trainer.train()
    result = {
        "side": "trl",
        "kind": spec.kind,
        "step_times": step_times,
        "tokens_per_step": counter.tokens[: len(step_times)] if counter else None,
        "load_s": round(loop_start - STARTED, 2),
        "cuda_peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3) if spec.device == "cuda" else None,
        "versions": {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__},
    }
    result_path.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
