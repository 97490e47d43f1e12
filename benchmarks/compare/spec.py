"""One benchmark run's settings, shared by both sides: our command line is built from it
(`ours.py`) and the TRL runner reads it as JSON (`trl_runner.py`), so the two cannot drift.
Standard library only: the TRL runner may live in another venv."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

KINDS = ("sft", "rm", "dpo", "rloo", "grpo")


@dataclass
class RunSpec:
    kind: str  # one of KINDS
    model: str  # HF model directory (random-init Llama from a config)
    data: str  # data/tiny/<sft|preference|prompts>
    out_dir: str  # scratch output of this run
    steps: int  # optimizer steps (RL: iterations, one optimizer step each)
    batch: int  # per optimizer step: SFT samples, RM/DPO pairs, RL completions
    micro: int  # per forward/backward: SFT samples, pairs, completions
    lr: float
    max_len: int = 64  # truncation length (SFT: TRL's packed row length)
    threads: int = 2  # torch threads, both sides
    seed: int = 42
    beta: float = 0.1  # DPO
    n_samples: int = 8  # RL: completions per prompt (prompts per iteration = batch / n_samples)
    gen_len: int = 16  # RL: most new tokens per completion
    device: str = "cpu"  # "cpu" | "cuda": where both sides train
    bf16: bool = False  # ours --bf16 (DeepSpeed bf16: bf16 weights, fp32 master); TRL bf16=True (AMP
    # autocast over fp32 weights): fp32 master weights and optimizer state on both sides

    @property
    def accum(self) -> int:
        return self.batch // self.micro

    @property
    def prompts_per_iteration(self) -> int:
        return self.batch // self.n_samples

    def save(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "RunSpec":
        return cls(**json.loads(Path(path).read_text()))


def throughput(step_times: list[float], units: list[float]) -> float:
    """Units per second over steps 2..N: (sum of their units) / (end of step N - end of step 1).

    Step 1 (allocator warm-up, lazy inits) and everything before it (imports, model load, data
    preparation) are excluded the same way on both sides. `units[i]` belongs to step i+1."""
    if len(step_times) < 2:
        raise ValueError(f"need >= 2 timed steps, got {len(step_times)}")
    return sum(units[1 : len(step_times)]) / (step_times[-1] - step_times[0])


def seconds_per_step(step_times: list[float]) -> float:
    if len(step_times) < 2:
        raise ValueError(f"need >= 2 timed steps, got {len(step_times)}")
    return (step_times[-1] - step_times[0]) / (len(step_times) - 1)
