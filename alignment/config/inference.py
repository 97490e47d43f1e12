"""Batch inference's config: `python -m alignment.cli.batch_inference` (generate and/or score, then
post-process); chat and the reward server: config/serving.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from alignment.config.base import opt, require
from alignment.config.groups import Data, DataConfig, EvalDataset, Packing, PretrainMode, PromptFormat
from alignment.config.model import Model, ModelConfig, ModelData, ModelDS
from alignment.config.rewards import RewardSource, RewardSourceConfig, RewardSourceDS
from alignment.config.runs import Ranks, RanksConfig
from alignment.config.stages import StageConfig
from alignment.config.tree import group, stage

EVAL_TASKS = ("generate", "generate_vllm", "rm")
POST_PROCESSOR_NAMES = ("rs", "iter_dpo", "csft")  # alignment.inference.postprocess.POST_PROCESSORS


@dataclass(frozen=True)
class CsftPrompt:
    """`generate` settings; CsftPromptConfig checks them."""

    csft_prompt: str = opt("<rm_score>: {reward:.1f} ", "csft: prefix template, formatted with the reward")
    enable_csft: bool = opt(
        False,
        "Generate from a conditional-SFT model: prefix every prompt with --csft_prompt "
        "formatted with --csft_reward (ask for a high score)",
    )
    csft_reward: float = opt(
        1.0,
        "--enable_csft: the reward written into the prefix (the best score of the "
        "training data, e.g. 1.0 for the tiny world's rule reward)",
    )


class CsftPromptConfig:
    """The conditional-SFT prefix (OpenRLHF's csft): how the csft post-processor writes a row's score before
    its prompt, and how generation or a held-out evaluation asks a conditional-SFT model for a score."""

    def check_csft_prompt(self) -> None:
        try:
            self.generate.csft_prompt.format(reward=1.0)
        except (KeyError, IndexError, ValueError) as e:
            require(False, f"--csft_prompt {self.generate.csft_prompt!r}: must format with only {{reward}} ({e})")


@dataclass(frozen=True)
class BatchInferenceEvalOwn:
    """The `eval` settings only BatchInference has."""

    eval_task: str = opt(
        "generate",
        "generate (HF engine) / generate_vllm (vLLM engine): sample responses to "
        "--dataset prompts; rm: score (prompt, response) rows",
        choices=EVAL_TASKS,
    )


@dataclass(frozen=True)
class BatchInferenceCkpt:
    """The `ckpt` settings only BatchInference has."""

    output_path: str = opt(
        "./batch_inference",
        "Output directory (local or s3://): output.jsonl + MANIFEST.json",
        identity=False,
    )


@dataclass(frozen=True)
class BatchInferenceGenerateOwn:
    """The `generate` settings only BatchInference has."""

    best_of_n: int = opt(1, "Responses sampled per prompt")
    max_new_tokens: int = opt(1024, "Most new tokens per response", dotted="generate.max_new_tokens")
    temperature: float = opt(1.0, "Sampling temperature", dotted="generate.temperature")
    top_p: float = opt(1.0, "Nucleus sampling", dotted="generate.top_p")
    micro_batch_size: int = opt(16, "Prompts per generate/score call")
    post_processor: Optional[str] = opt(
        None,
        "rs: best response per prompt (SFT data); iter_dpo: best/worst "
        "pairs (DPO data); csft: reward-prefixed prompts",
        choices=POST_PROCESSOR_NAMES,
    )
    rs_min_reward: Optional[float] = opt(
        None,
        "rs: keep a prompt's best response only if its reward is at least "
        "this (default: always keep it, as OpenRLHF)",
    )
    iter: int = opt(0, "Round index for --rollout_batch_size (OpenRLHF's iterative DPO passes the round number)")


@dataclass(frozen=True)
class ScoredPrompts:
    """The `data` settings of the stages that score prompts' responses (batch inference, evaluate)."""

    prompt_max_len: int = opt(
        1024, "Prompts longer than this (tokens) are dropped, counted and reported", dotted="data.prompt_max_len"
    )
    label_key: Optional[str] = opt(None, "JSON key passed as `labels` to a reward_func / reward server")


@dataclass(frozen=True)
class BatchInferenceRollout:
    """The `rollout` settings only BatchInference has."""

    batch_size: int = opt(
        0,
        "Prompts per round of an iterative pipeline: this round takes rows "
        "[iter*N, (iter+1)*N) of the dataset, wrapping around (0: every row, up to --max_samples)",
        dotted="rollout.batch_size",
        flat="rollout_batch_size",
    )


@dataclass(frozen=True)
class BatchInferenceVLLM:
    """The `vllm` settings only BatchInference has."""

    num_engines: int = opt(
        0,
        "--eval_task generate_vllm: vLLM engines, one rank (GPU) each, each generating "
        "its share of the prompts (0: --num_nodes x --num_gpus_per_node ranks)",
        dotted="vllm.num_engines",
        flat="vllm_num_engines",
    )


@dataclass(frozen=True)
class BatchInferenceTrain:
    """The `train` settings only BatchInference has."""

    seed: int = opt(42, "Sampling seed")
    num_threads: int = opt(0, "CPU threads per rank (0: cores / ranks on this node)", identity=False)


@dataclass(frozen=True)
class BatchInferenceModel(PretrainMode, Model):
    pass


@dataclass(frozen=True)
class BatchInferenceDS(RewardSourceDS, Packing, ModelDS):
    pass


@dataclass(frozen=True)
class BatchInferenceData(ScoredPrompts, Data, PromptFormat, ModelData):
    pass


@dataclass(frozen=True)
class BatchInferenceEval(BatchInferenceEvalOwn, EvalDataset):
    pass


@dataclass(frozen=True)
class BatchInferenceGenerate(BatchInferenceGenerateOwn, CsftPrompt):
    pass


@stage
class BatchInferenceConfig(CsftPromptConfig, RewardSourceConfig, RanksConfig, DataConfig, ModelConfig, StageConfig):
    model = group(BatchInferenceModel)
    ds = group(BatchInferenceDS)
    data = group(BatchInferenceData)
    eval = group(BatchInferenceEval)
    ranks = group(Ranks)
    reward = group(RewardSource)
    generate = group(BatchInferenceGenerate)
    ckpt = group(BatchInferenceCkpt)
    rollout = group(BatchInferenceRollout)
    vllm = group(BatchInferenceVLLM)
    train = group(BatchInferenceTrain)

    def world_size(self) -> int:
        """Data-parallel ranks: one per vLLM engine with generate_vllm, else the placement's size."""
        if self.eval.eval_task == "generate_vllm" and self.vllm.num_engines:
            return self.vllm.num_engines
        return super().world_size()

    def ranks_flags(self) -> str:
        if self.eval.eval_task == "generate_vllm" and self.vllm.num_engines:
            return f"--vllm_num_engines {self.vllm.num_engines}"
        return super().ranks_flags()

    def check_batch_inference(self) -> None:
        require(self.vllm.num_engines >= 0, f"--vllm_num_engines {self.vllm.num_engines}: must be >= 0")
        require(
            not (self.vllm.num_engines and self.eval.eval_task != "generate_vllm"),
            f"--vllm_num_engines {self.vllm.num_engines} needs --eval_task generate_vllm; the HF engine "
            f"({self.eval.eval_task}) spreads over --num_nodes x --num_gpus_per_node ranks",
        )
        require(
            self.rollout.batch_size >= 0 and self.generate.iter >= 0,
            f"--rollout_batch_size {self.rollout.batch_size} / --iter {self.generate.iter}: must be >= 0",
        )
        require(
            bool(self.model.model_name_or_path),
            "--pretrain is required: the policy (generate) or any model with the tokenizer (rm)",
        )
        require(bool(self.data.dataset), "--dataset is required: prompts (generate) or prompt/response rows (rm)")
        require(
            not self.ckpt.output_path.endswith((".jsonl", ".json")),
            f"--output_path {self.ckpt.output_path}: give a directory (local or s3://); output.jsonl and a "
            f"MANIFEST.json are written inside it",
        )
        require(
            self.generate.best_of_n >= 1 and self.generate.micro_batch_size >= 1 and self.generate.max_new_tokens >= 1,
            "--best_of_n, --micro_batch_size and --max_new_tokens must be >= 1",
        )
        require(
            self.generate.temperature > 0 and 0 < self.generate.top_p <= 1,
            f"--temperature {self.generate.temperature} must be > 0 and --top_p {self.generate.top_p} in (0, 1]",
        )
        scored = self.has_reward()
        if self.eval.eval_task == "rm":
            require(scored, "--eval_task rm needs a reward: --reward_pretrain DIR or --remote_rm_url URL|file.py")
            require(
                bool(self.data.output_key),
                "--eval_task rm scores existing responses: set --output_key (the JSON key of the response)",
            )
        if self.generate.post_processor:
            require(
                scored,
                f"--post_processor {self.generate.post_processor} ranks responses by reward: add --reward_pretrain "
                f"or --remote_rm_url",
            )
        require(
            self.generate.rs_min_reward is None or self.generate.post_processor == "rs",
            f"--rs_min_reward {self.generate.rs_min_reward} filters --post_processor rs, which is not set",
        )
        require(
            not (self.generate.enable_csft and self.eval.eval_task == "rm"),
            "--enable_csft prefixes generation prompts; --eval_task rm generates nothing: drop one of them",
        )
        if self.generate.post_processor == "iter_dpo":
            require(
                self.eval.eval_task == "rm" or self.generate.best_of_n >= 2,
                "--post_processor iter_dpo pairs the best and worst response of a prompt: use --best_of_n >= 2",
            )
