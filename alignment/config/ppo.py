"""The PPO family's config (`python -m alignment.cli.train_ppo_ray`), with OpenRLHF's flag names.

Torch-free like the rest of the schema: the advantage estimators and loss aggregations are named
in `alignment.losses.estimators` (torch-free too), with what each one implies.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Optional

from alignment.config.agent import AgentConfig
from alignment.config.base import opt, require
from alignment.config.groups import (
    DATASET_NUM_PROC_HELP,
    CheckpointConfig,
    LoggingConfig,
    LoraConfig,
    LoraSaveConfig,
    ModelConfig,
    PackingConfig,
    PromptFormatConfig,
    TrainConfig,
    check_mixing,
)
from alignment.config.placement import PlacementConfig
from alignment.config.rewards import RewardSourceConfig
from alignment.config.sleep import SleepConfig
from alignment.config.stages import StageConfig
from alignment.losses.estimators import ESTIMATORS, LOSS_AGG_MODES

ADVANTAGE_ESTIMATORS = tuple(ESTIMATORS)
KL_ESTIMATORS = ("k1", "k2", "k3")


@dataclass
class RolloutConfig(PromptFormatConfig):
    prompt_data: Optional[str] = opt(
        None, "Comma-separated prompt datasets (same forms as --dataset)", path="data", dotted="data.prompt_dataset"
    )
    prompt_data_probs: Optional[str] = opt(None, "Sampling probabilities for --prompt_data", dotted="data.prompt_probs")
    prompt_split: str = opt("train", "Split of --prompt_data to train on", dotted="data.prompt_split")
    eval_dataset: Optional[str] = opt(
        None, "Prompts for periodic held-out evaluation", path="data", dotted="eval.dataset"
    )
    label_key: Optional[str] = opt(
        None, "JSON key passed as `labels` to a reward_func / remote RM", dotted="data.label_key"
    )
    max_samples: int = opt(100_000_000, "Use at most this many prompts", dotted="data.max_samples")
    dataset_num_proc: int = opt(0, DATASET_NUM_PROC_HELP, identity=False)
    prompt_max_len: int = opt(
        1024, "Prompts longer than this (in tokens) are dropped, counted and reported", dotted="data.prompt_max_len"
    )
    generate_max_len: int = opt(1024, "Most new tokens per response", dotted="rollout.max_new_tokens")
    temperature: float = opt(1.0, "Sampling temperature", dotted="rollout.temperature")
    top_p: float = opt(1.0, "Nucleus sampling", dotted="rollout.top_p")
    n_samples_per_prompt: int = opt(
        1, "Responses sampled per prompt (group estimators need >= 2)", dotted="rollout.n_samples_per_prompt"
    )
    num_episodes: int = opt(
        1, "Passes over the prompt data (--max_epochs is passes over each rollout batch)", dotted="train.num_episodes"
    )
    rollout_batch_size: int = opt(1024, "Prompts per PPO iteration", dotted="rollout.batch_size")
    micro_rollout_batch_size: int = opt(
        8, "Sequences per rank per forward when making experience", dotted="rollout.micro_batch_size"
    )
    vllm_num_engines: int = opt(
        0, "vLLM rollout engines (0: the batched HF engine inside the actor)", dotted="vllm.num_engines"
    )
    vllm_tensor_parallel_size: int = opt(
        1, "Tensor-parallel size of each vLLM engine", dotted="vllm.tensor_parallel_size"
    )
    vllm_gpu_memory_utilization: float = opt(
        0.9, "Fraction of GPU memory vLLM may take", dotted="vllm.gpu_memory_utilization"
    )
    vllm_sync_backend: str = opt(
        "nccl",
        "Weight sync to the vLLM engines: a broadcast from actor rank 0 over NCCL (GPUs, "
        "engines on their own GPUs) or gloo (CPU); nccl without GPUs or with "
        "--colocate_all_models sends chunks through Ray's object store instead (logged)",
        choices=("nccl", "gloo"),
        dotted="vllm.sync_backend",
    )
    enable_prefix_caching: bool = opt(False, "vLLM prefix caching", dotted="vllm.enable_prefix_caching")
    enforce_eager: bool = opt(
        True,
        "vLLM engines without CUDA graphs. They always run eager here (alignment/rollout/"
        "vllm_engine.py), so OpenRLHF's --enforce_eager is what happens and "
        "--enforce_eager false is refused",
        dotted="vllm.enforce_eager",
    )
    vllm_sync_chunk_mb: int = opt(64, "Most megabytes per chunk when the actor's weights are sent to the vLLM engines")

    def check_rollout(self) -> None:
        require(bool(self.prompt_data), "--prompt_data is required: pass a .jsonl file, json@DIR or a hub name")
        check_mixing("--prompt_data", self.prompt_data, "--prompt_data_probs", self.prompt_data_probs)
        require(self.dataset_num_proc >= 0, f"--dataset_num_proc {self.dataset_num_proc}: must be >= 0 (0: automatic)")
        require(
            self.prompt_max_len > 0 and self.generate_max_len > 0,
            f"--prompt_max_len {self.prompt_max_len} / --generate_max_len {self.generate_max_len}: must be > 0",
        )
        require(self.temperature > 0, f"--temperature {self.temperature}: must be > 0")
        require(0 < self.top_p <= 1, f"--top_p {self.top_p}: must be in (0, 1]")
        require(self.n_samples_per_prompt >= 1, f"--n_samples_per_prompt {self.n_samples_per_prompt}: must be >= 1")
        require(self.num_episodes >= 1, f"--num_episodes {self.num_episodes}: must be >= 1")
        require(
            self.rollout_batch_size > 0 and self.micro_rollout_batch_size > 0,
            "--rollout_batch_size and --micro_rollout_batch_size must be > 0",
        )
        require(self.vllm_num_engines >= 0, f"--vllm_num_engines {self.vllm_num_engines}: must be >= 0")
        require(self.vllm_sync_chunk_mb > 0, f"--vllm_sync_chunk_mb {self.vllm_sync_chunk_mb}: must be > 0")
        require(
            self.enforce_eager,
            "--enforce_eager false: CUDA-graph capture is not built for the vLLM engines "
            "(they run eager); drop the flag",
        )
        require(
            0 < self.vllm_gpu_memory_utilization <= 1,
            f"--vllm_gpu_memory_utilization {self.vllm_gpu_memory_utilization}: must be in (0, 1]",
        )


def only_with(cfg: Any, gate: str, *names: str) -> None:
    """Flags that mean something only with --gate: set without it they would be accepted and ignored."""
    defaults = {f.name: f.default for f in fields(cfg)}
    for name in names:
        require(
            getattr(cfg, name) == defaults[name], f"--{name} is set but --{gate} is not: add --{gate} or drop --{name}"
        )


@dataclass
class DynamicBatchConfig:
    use_dynamic_batch: bool = opt(
        False,
        "Cut micro-batches by a token budget instead of a row count: rows of similar "
        "length together, as many as fit, so short responses are not padded to the "
        "longest (--micro_train_batch_size / --micro_rollout_batch_size then no longer "
        "cut the training and log-prob passes; the step's rows and loss are unchanged)",
        dotted="train.dynamic_batch_enable",
    )
    train_max_tokens_per_gpu: int = opt(
        16192,
        "With --use_dynamic_batch: most tokens per training micro-batch "
        "(rows x longest row; the real tokens with --packing_samples)",
        dotted="train.max_tokens_per_gpu",
    )
    rollout_max_tokens_per_gpu: Optional[int] = opt(
        None,
        "With --use_dynamic_batch: most tokens per log-prob / value "
        "forward when making experience (unset: "
        "--train_max_tokens_per_gpu)",
        dotted="rollout.max_tokens_per_gpu",
    )

    def check_dynamic_batch(self) -> None:
        if not self.use_dynamic_batch:
            return only_with(self, "use_dynamic_batch", "train_max_tokens_per_gpu", "rollout_max_tokens_per_gpu")
        longest = self.prompt_max_len + self.generate_max_len  # type: ignore[attr-defined]  (RolloutConfig)
        for name in ("train_max_tokens_per_gpu", "rollout_max_tokens_per_gpu"):
            value = getattr(self, name)
            require(
                value is None or value >= longest,
                f"--{name} {value} is below --prompt_max_len + --generate_max_len = {longest}, the longest "
                f"sample: raise it to at least {longest}",
            )


@dataclass
class AsyncTrainConfig:
    async_train: bool = opt(
        False,
        "Overlap rollouts with training (OpenRLHF's --async_train): the vLLM engines generate "
        "the next iteration's samples while this one trains, so samples come from a policy up "
        "to --async_queue_size updates old, and the PPO ratio is taken against the engines' "
        "sampled-token log-probs (the behaviour policy). Needs --vllm_num_engines >= 1",
        dotted="train.async_enable",
    )
    async_queue_size: int = opt(
        1,
        "With --async_train: iterations generated ahead of the one training (the bound on " "the policy lag)",
        dotted="train.async_queue_size",
    )

    def check_async_train(self) -> None:
        if not self.async_train:
            return only_with(self, "async_train", "async_queue_size")
        require(
            self.vllm_num_engines >= 1,  # type: ignore[attr-defined]  (RolloutConfig)
            "--async_train overlaps generation on the vLLM engines with training on the actor: add "
            "--vllm_num_engines 1 (or more); the HF engine generates on the actor itself, so nothing would overlap",
        )
        require(self.async_queue_size >= 1, f"--async_queue_size {self.async_queue_size}: must be >= 1")


@dataclass
class AlgorithmConfig:
    advantage_estimator: str = opt(
        "gae", "How advantages are computed", choices=ADVANTAGE_ESTIMATORS, dotted="algo.advantage.estimator"
    )
    gamma: float = opt(1.0, "Discount", dotted="algo.advantage.gamma")
    lambd: float = opt(0.95, "GAE lambda", dotted="algo.advantage.lambd")
    init_kl_coef: float = opt(0.01, "KL coefficient (initial value when adaptive)", dotted="algo.kl.init_coef")
    kl_estimator: str = opt(
        "k1", "Per-token KL estimator (Schulman's k1/k2/k3)", choices=KL_ESTIMATORS, dotted="algo.kl.estimator"
    )
    use_kl_loss: bool = opt(
        False, "Put the KL in the actor loss (GRPO) instead of the reward", dotted="algo.kl.use_loss"
    )
    kl_target: Optional[float] = opt(None, "Adaptive KL: target KL (unset: fixed coefficient)", dotted="algo.kl.target")
    kl_horizon: int = opt(10000, "Adaptive KL horizon", dotted="algo.kl.horizon")
    loss_agg_mode: Optional[str] = opt(
        None,
        "How per-token losses become an optimizer step's loss: token-mean (every response token of the step, "
        "across micro-batches and ranks, weighs the same), seq-mean-token-mean (every sequence weighs the same), "
        "seq-mean-token-sum-norm (each sequence's token sum / --generate_max_len: Dr. GRPO). Default: the "
        "estimator's (dr_grpo: seq-mean-token-sum-norm, the others token-mean)",
        choices=LOSS_AGG_MODES,
    )
    eps_clip: float = opt(0.2, "PPO clip range (both sides unless --eps_clip_low_high)", dotted="actor.eps_clip")
    eps_clip_low_high: Optional[list[float]] = opt(
        None, "Asymmetric clip range: low high", dotted="actor.eps_clip_low_high"
    )
    dual_clip: Optional[float] = opt(None, "Dual-clip constant c > 1 for negative advantages", dotted="actor.dual_clip")
    enable_vllm_is_correction: bool = opt(
        False,
        "Weigh each sampled token's policy-loss term by min(trainer prob / "
        "engine prob, --vllm_is_truncated_threshold): truncated importance "
        "sampling between the vLLM engine that sampled and the trainer",
        aliases=("--vllm_enable_is_correction",),
        dotted="algo.advantage.is_correction_enable",
    )
    vllm_is_truncated_threshold: float = opt(2.0, "The cap of --enable_vllm_is_correction's weights")
    dynamic_filtering: bool = opt(
        False,
        "DAPO's dynamic sampling: drop the groups whose mean score is outside "
        "--dynamic_filtering_reward_range (all right or all wrong: zero advantage) "
        "and sample more prompts until the batch is full",
        dotted="algo.dynamic_filtering_enable",
    )
    dynamic_filtering_reward_range: list[float] = opt(
        [0.0, 1.0], "Keep groups whose mean score is strictly inside " "LOW HIGH", dotted="algo.dynamic_filtering_range"
    )
    enable_ema: bool = opt(
        False,
        "Keep an exponential moving average of the actor's weights (updated every optimizer "
        "step, in every checkpoint) and commit it beside the actor as <save_path>/ema/",
        dotted="train.enable_ema",
    )
    ema_beta: float = opt(
        0.992, "The average's decay: ema = beta * ema + (1 - beta) * weights", dotted="train.ema_beta"
    )
    policy_loss_type: str = opt(
        "ppo",
        "Actor objective: ppo (a ratio per token) or gspo (one ratio per sequence, "
        "GSPO; pair it with a small --eps_clip_low_high, e.g. 3e-4 4e-4)",
        choices=("ppo", "gspo"),
        dotted="actor.policy_loss_type",
    )
    overlong_buffer_len: Optional[int] = opt(
        None,
        "DAPO's overlong shaping: responses longer than --generate_max_len "
        "minus this many tokens lose reward linearly, down to "
        "--overlong_penalty_factor at --generate_max_len (unset: off)",
        dotted="reward.overlong_buffer_len",
    )
    overlong_penalty_factor: float = opt(
        1.0, "The largest overlong penalty (with --overlong_buffer_len)", dotted="reward.overlong_penalty_factor"
    )
    value_clip: float = opt(0.2, "Value clip range", dotted="critic.value_clip")
    critic_pretrain: Optional[str] = opt(
        None,
        "Critic initialisation (default: the reward model, as OpenRLHF)",
        path="model",
        dotted="critic.model_name_or_path",
    )
    reward_clip_range: list[float] = opt([-10.0, 10.0], "Clip rewards to this range", dotted="reward.clip_range")
    freezing_actor_steps: int = opt(
        -1, "Train only the critic for this many iterations (critic warm-up)", dotted="critic.freezing_steps"
    )
    actor_learning_rate: float = opt(1e-6, "Actor peak learning rate", dotted="actor.adam.lr")
    critic_learning_rate: float = opt(9e-6, "Critic peak learning rate", dotted="critic.adam.lr")

    def uses_critic(self) -> bool:
        return ESTIMATORS[self.advantage_estimator].critic

    def loss_agg(self) -> str:
        return self.loss_agg_mode or ESTIMATORS[self.advantage_estimator].loss_agg

    def check_algorithm(self) -> None:
        if ESTIMATORS[self.advantage_estimator].group:
            require(
                self.n_samples_per_prompt >= 2,
                f"--advantage_estimator {self.advantage_estimator} compares the samples of one prompt: "
                f"--n_samples_per_prompt {self.n_samples_per_prompt} gives nothing to compare; use >= 2 (e.g. 4)",
            )
        require(
            0 < self.gamma <= 1 and 0 <= self.lambd <= 1,
            f"--gamma {self.gamma} must be in (0, 1] and --lambd {self.lambd} in [0, 1]",
        )
        require(self.init_kl_coef >= 0, f"--init_kl_coef {self.init_kl_coef}: must be >= 0")
        require(self.eps_clip > 0, f"--eps_clip {self.eps_clip}: must be > 0")
        if self.eps_clip_low_high is not None:
            require(
                len(self.eps_clip_low_high) == 2 and all(e > 0 for e in self.eps_clip_low_high),
                f"--eps_clip_low_high {self.eps_clip_low_high}: give two positive numbers, low high",
            )
        if self.dual_clip is not None:
            require(self.dual_clip > 1, f"--dual_clip {self.dual_clip}: must be > 1 (e.g. 3)")
        lo, hi = (self.reward_clip_range + [None, None])[:2]
        require(
            len(self.reward_clip_range) == 2 and lo < hi,
            f"--reward_clip_range {self.reward_clip_range}: give two numbers, low < high",
        )
        require(
            self.actor_learning_rate > 0 and self.critic_learning_rate > 0,
            "--actor_learning_rate and --critic_learning_rate must be > 0",
        )
        if self.overlong_buffer_len is not None:
            require(
                0 < self.overlong_buffer_len < self.generate_max_len,
                f"--overlong_buffer_len {self.overlong_buffer_len}: must be between 0 and --generate_max_len "
                f"{self.generate_max_len} (the penalty starts that many tokens before the limit)",
            )
            require(
                self.overlong_penalty_factor >= 0,
                f"--overlong_penalty_factor {self.overlong_penalty_factor}: must be >= 0",
            )


@dataclass
class PPOConfig(
    LoggingConfig,
    CheckpointConfig,
    TrainConfig,
    LoraConfig,
    LoraSaveConfig,
    AlgorithmConfig,
    AgentConfig,
    SleepConfig,
    RewardSourceConfig,
    AsyncTrainConfig,
    DynamicBatchConfig,
    RolloutConfig,
    PlacementConfig,
    PackingConfig,
    ModelConfig,
    StageConfig,
):
    """PPO / REINFORCE++ / RLOO / GRPO on Ray (`python -m alignment.cli.train_ppo_ray`)."""

    running_reward_norm: ClassVar[bool] = True

    # OpenRLHF's dotted names call the policy `actor` here (--actor.model_name_or_path), `model` elsewhere
    dotted_family: ClassVar[str] = "ppo"

    def placed_roles(self) -> list[str]:
        """actor and ref always; a critic for GAE only; reward models unless the reward comes from
        --remote_rm_url (a server or a reward_func file runs in the driver)."""
        return [
            "actor",
            *(["critic"] if self.uses_critic() else []),
            "ref",
            *(["reward"] if self.reward_pretrain and not self.remote_rm_url else []),
        ]

    def check_ppo(self) -> None:
        if self.enable_ema:
            require(0 < self.ema_beta < 1, f"--ema_beta {self.ema_beta}: must be in (0, 1), e.g. 0.992")
            require(
                self.zero_stage != 3,
                "--enable_ema averages the whole actor on every rank; ZeRO-3 partitions it: "
                "use --zero_stage 0-2 or drop --enable_ema",
            )
        if self.dynamic_filtering:
            require(
                ESTIMATORS[self.advantage_estimator].group,
                f"--dynamic_filtering drops the groups a group estimator gives zero advantage; --advantage_estimator "
                f"{self.advantage_estimator} compares no groups: use group_norm, rloo, reinforce_baseline or dr_grpo",
            )
            lo_hi = self.dynamic_filtering_reward_range
            require(
                len(lo_hi) == 2 and lo_hi[0] < lo_hi[1],
                f"--dynamic_filtering_reward_range {lo_hi}: give two numbers, LOW < HIGH (e.g. 0 1)",
            )
        if self.enable_vllm_is_correction:
            require(
                self.vllm_num_engines >= 1,
                "--enable_vllm_is_correction weighs vLLM engines' samples for the trainer; with the HF engine the "
                "trainer's own module samples (no mismatch): add --vllm_num_engines 1 or drop the flag",
            )
            require(
                not self.async_train,
                "--enable_vllm_is_correction with --async_train: the ratio is already taken against the engine's "
                "log-probs there (the behaviour policy); drop one of them",
            )
            require(
                self.vllm_is_truncated_threshold > 0,
                f"--vllm_is_truncated_threshold {self.vllm_is_truncated_threshold}: must be > 0 (e.g. 2)",
            )
        require(
            self.has_reward() or bool(self.agent_func_path),
            "no reward: pass --reward_pretrain (a trained RM), --remote_rm_url (a server URL or a reward_func .py "
            "file) or --agent_func_path (an environment that gives rewards)",
        )
        if self.uses_critic():
            return
        # critic-free estimators: OpenRLHF places no critic then; a critic flag is a mistake worth naming
        require(
            self.critic_pretrain is None,
            f"--critic_pretrain is set but --advantage_estimator {self.advantage_estimator} uses no critic; "
            f"drop it or use --advantage_estimator gae",
        )
