"""Inference configs: `python -m alignment.cli.batch_inference` (generate and/or score, then post-process)
and `python -m alignment.cli.interactive_chat`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from alignment.config.base import opt, require
from alignment.config.groups import DataConfig, ModelConfig
from alignment.config.rewards import RewardSourceConfig
from alignment.config.runs import RanksConfig
from alignment.config.stages import StageConfig

EVAL_TASKS = ("generate", "generate_vllm", "rm")
POST_PROCESSOR_NAMES = ("rs", "iter_dpo", "csft")  # alignment.inference.postprocess.POST_PROCESSORS


@dataclass
class CsftPromptConfig:
    """The conditional-SFT prefix (OpenRLHF's csft): how the csft post-processor writes a row's score before
    its prompt, and how generation or a held-out evaluation asks a conditional-SFT model for a score."""

    own_group: ClassVar[str] = "generate"

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

    def check_csft_prompt(self) -> None:
        try:
            self.csft_prompt.format(reward=1.0)
        except (KeyError, IndexError, ValueError) as e:
            require(False, f"--csft_prompt {self.csft_prompt!r}: must format with only {{reward}} ({e})")


@dataclass
class BatchInferenceConfig(CsftPromptConfig, RewardSourceConfig, RanksConfig, DataConfig, ModelConfig, StageConfig):
    own_group: ClassVar[str] = "generate"

    eval_task: str = opt(
        "generate",
        "generate (HF engine) / generate_vllm (vLLM engine): sample responses to "
        "--dataset prompts; rm: score (prompt, response) rows",
        choices=EVAL_TASKS,
        group="eval",
    )
    output_path: str = opt(
        "./batch_inference",
        "Output directory (local or s3://): output.jsonl + MANIFEST.json",
        identity=False,
        group="ckpt",
    )
    best_of_n: int = opt(1, "Responses sampled per prompt")
    max_new_tokens: int = opt(1024, "Most new tokens per response", dotted="generate.max_new_tokens")
    prompt_max_len: int = opt(
        1024, "Prompts longer than this (tokens) are dropped, counted and reported", dotted="data.prompt_max_len"
    )
    temperature: float = opt(1.0, "Sampling temperature", dotted="generate.temperature")
    top_p: float = opt(1.0, "Nucleus sampling", dotted="generate.top_p")
    micro_batch_size: int = opt(16, "Prompts per generate/score call", group="generate")
    label_key: Optional[str] = opt(None, "JSON key passed as `labels` to a reward_func / reward server", group="data")
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
    rollout_batch_size: int = opt(
        0,
        "Prompts per round of an iterative pipeline: this round takes rows "
        "[iter*N, (iter+1)*N) of the dataset, wrapping around (0: every row, up to --max_samples)",
        dotted="rollout.batch_size",
    )
    iter: int = opt(0, "Round index for --rollout_batch_size (OpenRLHF's iterative DPO passes the round number)")
    vllm_num_engines: int = opt(
        0,
        "--eval_task generate_vllm: vLLM engines, one rank (GPU) each, each generating "
        "its share of the prompts (0: --num_nodes x --num_gpus_per_node ranks)",
        dotted="vllm.num_engines",
    )
    seed: int = opt(42, "Sampling seed", group="train")
    num_threads: int = opt(0, "CPU threads per rank (0: cores / ranks on this node)", identity=False, group="train")

    def world_size(self) -> int:
        """Data-parallel ranks: one per vLLM engine with generate_vllm, else the placement's size."""
        if self.eval_task == "generate_vllm" and self.vllm_num_engines:
            return self.vllm_num_engines
        return super().world_size()

    def ranks_flags(self) -> str:
        if self.eval_task == "generate_vllm" and self.vllm_num_engines:
            return f"--vllm_num_engines {self.vllm_num_engines}"
        return super().ranks_flags()

    def check_batch_inference(self) -> None:
        require(self.vllm_num_engines >= 0, f"--vllm_num_engines {self.vllm_num_engines}: must be >= 0")
        require(
            not (self.vllm_num_engines and self.eval_task != "generate_vllm"),
            f"--vllm_num_engines {self.vllm_num_engines} needs --eval_task generate_vllm; the HF engine "
            f"({self.eval_task}) spreads over --num_nodes x --num_gpus_per_node ranks",
        )
        require(
            self.rollout_batch_size >= 0 and self.iter >= 0,
            f"--rollout_batch_size {self.rollout_batch_size} / --iter {self.iter}: must be >= 0",
        )
        require(
            bool(self.pretrain), "--pretrain is required: the policy (generate) or any model with the tokenizer (rm)"
        )
        require(bool(self.dataset), "--dataset is required: prompts (generate) or prompt/response rows (rm)")
        require(
            not self.output_path.endswith((".jsonl", ".json")),
            f"--output_path {self.output_path}: give a directory (local or s3://); output.jsonl and a "
            f"MANIFEST.json are written inside it",
        )
        require(
            self.best_of_n >= 1 and self.micro_batch_size >= 1 and self.max_new_tokens >= 1,
            "--best_of_n, --micro_batch_size and --max_new_tokens must be >= 1",
        )
        require(
            self.temperature > 0 and 0 < self.top_p <= 1,
            f"--temperature {self.temperature} must be > 0 and --top_p {self.top_p} in (0, 1]",
        )
        scored = self.has_reward()
        if self.eval_task == "rm":
            require(scored, "--eval_task rm needs a reward: --reward_pretrain DIR or --remote_rm_url URL|file.py")
            require(
                bool(self.output_key),
                "--eval_task rm scores existing responses: set --output_key (the JSON key of the response)",
            )
        if self.post_processor:
            require(
                scored,
                f"--post_processor {self.post_processor} ranks responses by reward: add --reward_pretrain "
                f"or --remote_rm_url",
            )
        require(
            self.rs_min_reward is None or self.post_processor == "rs",
            f"--rs_min_reward {self.rs_min_reward} filters --post_processor rs, which is not set",
        )
        require(
            not (self.enable_csft and self.eval_task == "rm"),
            "--enable_csft prefixes generation prompts; --eval_task rm generates nothing: drop one of them",
        )
        if self.post_processor == "iter_dpo":
            require(
                self.eval_task == "rm" or self.best_of_n >= 2,
                "--post_processor iter_dpo pairs the best and worst response of a prompt: use --best_of_n >= 2",
            )


@dataclass
class ChatConfig(ModelConfig, StageConfig):
    """Chat with a model in the terminal (`python -m alignment.cli.interactive_chat`)."""

    own_group: ClassVar[str] = "generate"

    apply_chat_template: bool = opt(
        False,
        "Render the conversation with the tokenizer's chat template; without it "
        "plain text: 'User: ...\\nAssistant: ...\\n' per turn, ending in 'Assistant: '",
        dotted="data.apply_chat_template",
    )
    max_len: int = opt(
        4096, "Most tokens of conversation plus reply; the oldest turns are dropped to fit", dotted="data.max_len"
    )
    max_new_tokens: int = opt(512, "Most new tokens per reply", dotted="generate.max_new_tokens")
    temperature: float = opt(0.6, "Sampling temperature", dotted="generate.temperature")
    top_p: float = opt(0.9, "Nucleus sampling", dotted="generate.top_p")
    greedy: bool = opt(False, "Greedy decoding (ignores --temperature and --top_p)", aliases=("--greedy_sampling",))
    seed: int = opt(42, "Sampling seed (set once, at start)", group="train")

    def check_chat(self) -> None:
        require(self.max_new_tokens >= 1, f"--max_new_tokens {self.max_new_tokens}: must be >= 1")
        require(
            self.max_len > self.max_new_tokens,
            f"--max_len {self.max_len} must be larger than --max_new_tokens {self.max_new_tokens} "
            f"(room is needed for the conversation)",
        )
        require(
            self.temperature > 0 and 0 < self.top_p <= 1,
            f"--temperature {self.temperature} must be > 0 and --top_p {self.top_p} in (0, 1]",
        )


@dataclass
class ServeRMConfig(RewardSourceConfig, ModelConfig, StageConfig):
    """`python -m alignment.cli.serve_rm`: an HTTP reward endpoint over reward models or a reward_func file."""

    own_group: ClassVar[str] = "serve"

    host: str = opt("127.0.0.1", "Address to listen on (loopback by default; 0.0.0.0 to serve a cluster)")
    port: int = opt(5000, "Port to listen on (0: any free port, printed at start)")
    batch_size: int = opt(64, "Queries per forward pass")
    max_len: int = opt(2048, "Queries longer than this many tokens are refused (400)", dotted="data.max_len")
    max_batch: int = opt(1024, "Most queries in one request (more: 413)")
    max_request_bytes: int = opt(16 << 20, "Largest request body (more: 413)")
    num_threads: int = opt(0, "CPU threads for scoring (0: all cores)", group="train")
    packing_samples: bool = opt(
        False,
        "Score each batch's queries packed into rows of at most --max_len tokens (one row under flash-attention) "
        "instead of padded to the longest; reward models only (a process reward model scores padded)",
        dotted="ds.packing_samples",
    )

    def check_model(self) -> None:
        """--pretrain only names the tokenizer here; by default the (first) reward model's."""
        require(not self.load_in_4bit, "--load_in_4bit is a training flag; serve_rm loads reward models as saved")

    def check_serve(self) -> None:
        require(
            bool(self.reward_pretrain) != bool(self.remote_rm_url),
            "give exactly one reward: --reward_pretrain DIR[,DIR] or --remote_rm_url reward_func.py",
        )
        require(
            not self.remote_rm_url or self.remote_rm_url.endswith(".py"),
            f"--remote_rm_url {self.remote_rm_url}: serve_rm serves a reward_func .py file, not another server",
        )
        require(0 <= self.port < 65536, f"--port {self.port}: must be in 0..65535")
        require(
            not self.packing_samples or bool(self.reward_pretrain),
            "--packing_samples packs reward models' forward passes; a reward_func file has none: drop the flag",
        )
        require(
            min(self.batch_size, self.max_len, self.max_batch, self.max_request_bytes) > 0,
            "--batch_size, --max_len, --max_batch and --max_request_bytes must be > 0",
        )
