"""Talking to a model: `python -m alignment.cli.interactive_chat` (ChatConfig) and a reward model served over
HTTP, `python -m alignment.cli.serve_rm` (ServeRMConfig)."""

from __future__ import annotations

from dataclasses import dataclass

from alignment.config.base import opt, require
from alignment.config.model import Model, ModelConfig, ModelData, ModelDS
from alignment.config.rewards import RewardSource, RewardSourceConfig, RewardSourceDS
from alignment.config.stages import StageConfig
from alignment.config.tree import group, stage


@dataclass(frozen=True)
class ChatDataOwn:
    """The `data` settings only Chat has."""

    apply_chat_template: bool = opt(
        False,
        "Render the conversation with the tokenizer's chat template; without it "
        "plain text: 'User: ...\\nAssistant: ...\\n' per turn, ending in 'Assistant: '",
        dotted="data.apply_chat_template",
    )
    max_len: int = opt(
        4096, "Most tokens of conversation plus reply; the oldest turns are dropped to fit", dotted="data.max_len"
    )


@dataclass(frozen=True)
class ChatGenerate:
    """The `generate` settings only Chat has."""

    max_new_tokens: int = opt(512, "Most new tokens per reply", dotted="generate.max_new_tokens")
    temperature: float = opt(0.6, "Sampling temperature", dotted="generate.temperature")
    top_p: float = opt(0.9, "Nucleus sampling", dotted="generate.top_p")
    greedy: bool = opt(False, "Greedy decoding (ignores --temperature and --top_p)", aliases=("--greedy_sampling",))


@dataclass(frozen=True)
class ChatTrain:
    """The `train` settings only Chat has."""

    seed: int = opt(42, "Sampling seed (set once, at start)")


@dataclass(frozen=True)
class ChatData(ChatDataOwn, ModelData):
    pass


@stage
class ChatConfig(ModelConfig, StageConfig):
    """Chat with a model in the terminal (`python -m alignment.cli.interactive_chat`)."""

    model = group(Model)
    ds = group(ModelDS)
    data = group(ChatData)
    generate = group(ChatGenerate)
    train = group(ChatTrain)

    def check_chat(self) -> None:
        require(self.generate.max_new_tokens >= 1, f"--max_new_tokens {self.generate.max_new_tokens}: must be >= 1")
        require(
            self.data.max_len > self.generate.max_new_tokens,
            f"--max_len {self.data.max_len} must be larger than --max_new_tokens {self.generate.max_new_tokens} "
            f"(room is needed for the conversation)",
        )
        require(
            self.generate.temperature > 0 and 0 < self.generate.top_p <= 1,
            f"--temperature {self.generate.temperature} must be > 0 and --top_p {self.generate.top_p} in (0, 1]",
        )


@dataclass(frozen=True)
class ServeRMServe:
    """The `serve` settings only ServeRM has."""

    host: str = opt("127.0.0.1", "Address to listen on (loopback by default; 0.0.0.0 to serve a cluster)")
    port: int = opt(5000, "Port to listen on (0: any free port, printed at start)")
    batch_size: int = opt(64, "Queries per forward pass")
    max_batch: int = opt(1024, "Most queries in one request (more: 413)")
    max_request_bytes: int = opt(16 << 20, "Largest request body (more: 413)")


@dataclass(frozen=True)
class ServeRMDataOwn:
    """The `data` settings only ServeRM has."""

    max_len: int = opt(2048, "Queries longer than this many tokens are refused (400)", dotted="data.max_len")


@dataclass(frozen=True)
class ServeRMTrain:
    """The `train` settings only ServeRM has."""

    num_threads: int = opt(0, "CPU threads for scoring (0: all cores)")


@dataclass(frozen=True)
class ServeRMDSOwn:
    """The `ds` settings only ServeRM has."""

    packing_samples: bool = opt(
        False,
        "Score each batch's queries packed into rows of at most --max_len tokens (one row under flash-attention) "
        "instead of padded to the longest; reward models only (a process reward model scores padded)",
        dotted="ds.packing_samples",
    )


@dataclass(frozen=True)
class ServeRMDS(ServeRMDSOwn, RewardSourceDS, ModelDS):
    pass


@dataclass(frozen=True)
class ServeRMData(ServeRMDataOwn, ModelData):
    pass


@stage
class ServeRMConfig(RewardSourceConfig, ModelConfig, StageConfig):
    """`python -m alignment.cli.serve_rm`: an HTTP reward endpoint over reward models or a reward_func file."""

    model = group(Model)
    ds = group(ServeRMDS)
    data = group(ServeRMData)
    reward = group(RewardSource)
    serve = group(ServeRMServe)
    train = group(ServeRMTrain)

    def check_model(self) -> None:
        """--pretrain only names the tokenizer here; by default the (first) reward model's."""
        require(not self.ds.load_in_4bit, "--load_in_4bit is a training flag; serve_rm loads reward models as saved")

    def check_serve(self) -> None:
        require(
            bool(self.reward.model_name_or_path) != bool(self.reward.remote_url),
            "give exactly one reward: --reward_pretrain DIR[,DIR] or --remote_rm_url reward_func.py",
        )
        require(
            not self.reward.remote_url or self.reward.remote_url.endswith(".py"),
            f"--remote_rm_url {self.reward.remote_url}: serve_rm serves a reward_func .py file, not another server",
        )
        require(0 <= self.serve.port < 65536, f"--port {self.serve.port}: must be in 0..65535")
        require(
            not self.ds.packing_samples or bool(self.reward.model_name_or_path),
            "--packing_samples packs reward models' forward passes; a reward_func file has none: drop the flag",
        )
        require(
            min(self.serve.batch_size, self.data.max_len, self.serve.max_batch, self.serve.max_request_bytes) > 0,
            "--batch_size, --max_len, --max_batch and --max_request_bytes must be > 0",
        )
