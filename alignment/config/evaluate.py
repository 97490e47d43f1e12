"""The `evaluate` stage's config (`python -m alignment.cli.evaluate`): one held-out measurement of one
committed model, as a stage of its own — placed on the cluster, cached by identity, committed to the
store like every other stage, and read by the flows' promotion gates and comparisons."""

from __future__ import annotations

from dataclasses import dataclass

from alignment.config.base import opt, require
from alignment.config.groups import Data, DataConfig, EvalDataset, PromptFormat
from alignment.config.inference import (
    BatchInferenceDS,
    BatchInferenceModel,
    CsftPrompt,
    CsftPromptConfig,
    ScoredPrompts,
)
from alignment.config.model import ModelConfig, ModelData
from alignment.config.pairs import PairData, PairDataConfig
from alignment.config.rewards import RewardSource, RewardSourceConfig
from alignment.config.runs import Ranks, RanksConfig
from alignment.config.stages import StageConfig
from alignment.config.tree import group, stage
from alignment.config.vision import VisionData, VisionDataConfig

# eval_task -> the metrics it commits
EVAL_METRICS = {
    "generate": ("accuracy", "mean_reward"),  # greedy responses to held-out prompts, scored (or matched)
    "pairs": ("pair_accuracy", "mean_margin"),  # a reward model on held-out (chosen, rejected) pairs
    "perplexity": ("perplexity", "nll"),  # a causal LM on held-out (prompt, response) rows
}
# which way is better, for a gate or a comparison that ranks models by one metric
HIGHER_IS_BETTER = {
    "accuracy": True,
    "mean_reward": True,
    "pair_accuracy": True,
    "mean_margin": True,
    "perplexity": False,
    "nll": False,
}


@dataclass(frozen=True)
class EvaluateEvalOwn:
    """The `eval` settings only Evaluate has."""

    eval_task: str = opt(
        "generate",
        "generate: greedy responses to --dataset prompts scored by the reward source "
        "(accuracy, mean_reward), or without one matched against --label_key (the "
        "response's last word is the label: accuracy); pairs: --pretrain is a reward model, scored on "
        "(--chosen_key, --rejected_key) pairs (pair_accuracy, mean_margin); perplexity: "
        "--pretrain's perplexity on the --output_key responses",
        choices=tuple(EVAL_METRICS),
    )
    correct_reward: float = opt(
        1.0,
        "generate: a response counts as right (accuracy) when its reward is at least "
        "this (1.0 for a 0/1 verifiable reward)",
    )


@dataclass(frozen=True)
class EvaluateCkpt:
    """The `ckpt` settings only Evaluate has."""

    output_path: str = opt(
        "./evaluation",
        "Output directory (local or s3://): evaluation.json + MANIFEST.json",
        identity=False,
    )


@dataclass(frozen=True)
class EvaluateGenerateOwn:
    """The `generate` settings only Evaluate has."""

    max_new_tokens: int = opt(256, "generate: most new tokens per response", dotted="generate.max_new_tokens")
    micro_batch_size: int = opt(32, "Rows per forward or generate call")


@dataclass(frozen=True)
class EvaluateTrain:
    """The `train` settings only Evaluate has."""

    num_threads: int = opt(0, "CPU threads per rank (0: cores / ranks on this node)", identity=False)


@dataclass(frozen=True)
class EvaluateData(ScoredPrompts, VisionData, PairData, Data, PromptFormat, ModelData):
    pass


@dataclass(frozen=True)
class EvaluateEval(EvaluateEvalOwn, EvalDataset):
    pass


@dataclass(frozen=True)
class EvaluateGenerate(EvaluateGenerateOwn, CsftPrompt):
    pass


@stage
class EvaluateConfig(
    VisionDataConfig,
    CsftPromptConfig,
    RewardSourceConfig,
    PairDataConfig,
    RanksConfig,
    DataConfig,
    ModelConfig,
    StageConfig,
):
    model = group(BatchInferenceModel)
    ds = group(BatchInferenceDS)
    data = group(EvaluateData)
    eval = group(EvaluateEval)
    ranks = group(Ranks)
    reward = group(RewardSource)
    generate = group(EvaluateGenerate)
    ckpt = group(EvaluateCkpt)
    train = group(EvaluateTrain)

    def metrics(self) -> tuple[str, ...]:
        return EVAL_METRICS[self.eval.eval_task]

    def check_evaluate(self) -> None:
        require(
            not self.with_images or self.eval.eval_task == "generate",
            f"--max_images_per_prompt {self.data.max_images_per_prompt} "
            f"with --eval_task {self.eval.eval_task}: images are "
            f"built for --eval_task generate; drop the image flags",
        )
        require(
            bool(self.model.model_name_or_path),
            "--pretrain is required: the model to evaluate (a directory, store URI or hub name)",
        )
        require(
            bool(self.data.dataset),
            "--dataset is required: the held-out rows (use --dataset_split test for a test split)",
        )
        require(
            not self.ckpt.output_path.endswith((".jsonl", ".json")),
            f"--output_path {self.ckpt.output_path}: give a directory (local or s3://); evaluation.json and a "
            f"MANIFEST.json are written inside it",
        )
        require(
            min(self.generate.max_new_tokens, self.data.prompt_max_len, self.generate.micro_batch_size) >= 1,
            "--max_new_tokens, --prompt_max_len and --micro_batch_size must be >= 1",
        )
        if self.eval.eval_task == "generate":
            require(
                self.has_reward() or bool(self.data.label_key),
                "--eval_task generate scores the responses: add --remote_rm_url reward_func.py|URL (with "
                "--label_key), --reward_pretrain RM_DIR, or only --label_key (the response's last word must "
                "be the label)",
            )
        else:
            require(
                not self.has_reward(),
                f"--eval_task {self.eval.eval_task} reads no reward source: drop "
                f"--reward_pretrain/--remote_rm_url (pairs scores with --pretrain itself)",
            )
        require(
            not self.generate.enable_csft or self.eval.eval_task == "generate",
            f"--enable_csft prefixes the prompts a model answers; --eval_task {self.eval.eval_task} generates nothing: "
            f"drop one of them",
        )
        if self.eval.eval_task == "perplexity":
            require(bool(self.data.output_key), "--eval_task perplexity needs the responses: set --output_key")
