"""The RL algorithm's settings: advantage estimator, KL, the actor's and critic's losses, reward shaping
(OpenRLHF's --algo.*, and the loss flags under --actor.*, --critic.*, --reward.*). Torch-free: the estimators
and loss aggregations are named in `alignment.losses.estimators`, with what each one implies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from alignment.config.base import opt, require
from alignment.losses.estimators import ESTIMATORS, LOSS_AGG_MODES

ADVANTAGE_ESTIMATORS = tuple(ESTIMATORS)


KL_ESTIMATORS = ("k1", "k2", "k3")


@dataclass(frozen=True)
class Advantage:
    """`algo.advantage` settings; AlgorithmConfig checks them."""

    estimator: str = opt(
        "gae",
        "How advantages are computed",
        choices=ADVANTAGE_ESTIMATORS,
        dotted="algo.advantage.estimator",
        flat="advantage_estimator",
    )
    gamma: float = opt(1.0, "Discount", dotted="algo.advantage.gamma")
    no_std_norm: bool = opt(
        False,
        "Whiten advantages by their mean only, not their std (the estimators that whiten: gae, reinforce, "
        "reinforce_baseline)",
        dotted="algo.advantage.no_std_norm",
    )
    lambd: float = opt(0.95, "GAE lambda", dotted="algo.advantage.lambd")


@dataclass(frozen=True)
class KL:
    """`algo.kl` settings; AlgorithmConfig checks them."""

    init_coef: float = opt(
        0.01, "KL coefficient (initial value when adaptive)", dotted="algo.kl.init_coef", flat="init_kl_coef"
    )
    estimator: str = opt(
        "k1",
        "Per-token KL estimator (Schulman's k1/k2/k3)",
        choices=KL_ESTIMATORS,
        dotted="algo.kl.estimator",
        flat="kl_estimator",
    )
    use_loss: bool = opt(
        False,
        "Put the KL in the actor loss (GRPO) instead of the reward",
        dotted="algo.kl.use_loss",
        flat="use_kl_loss",
    )
    target: Optional[float] = opt(
        None, "Adaptive KL: target KL (unset: fixed coefficient)", dotted="algo.kl.target", flat="kl_target"
    )
    horizon: int = opt(10000, "Adaptive KL horizon", dotted="algo.kl.horizon", flat="kl_horizon")


@dataclass(frozen=True)
class Algorithm:
    """`algo` settings; AlgorithmConfig checks them."""

    loss_agg_mode: Optional[str] = opt(
        None,
        "How per-token losses become an optimizer step's loss: token-mean (every response token of the step, "
        "across micro-batches and ranks, weighs the same), seq-mean-token-mean (every sequence weighs the same), "
        "seq-mean-token-sum-norm (each sequence's token sum / --generate_max_len: Dr. GRPO). Default: the "
        "estimator's (dr_grpo: seq-mean-token-sum-norm, the others token-mean)",
        choices=LOSS_AGG_MODES,
    )
    dynamic_filtering_enable: bool = opt(
        False,
        "DAPO's dynamic sampling: drop the groups whose mean score is outside "
        "--dynamic_filtering_reward_range (all right or all wrong: nothing to learn) "
        "and sample more prompts until the batch is full; any estimator, with --n_samples_per_prompt >= 2",
        dotted="algo.dynamic_filtering_enable",
        flat="dynamic_filtering",
    )
    dynamic_filtering_range: list[float] = opt(
        [0.0, 1.0],
        "Keep groups whose mean score is strictly inside LOW HIGH",
        dotted="algo.dynamic_filtering_range",
        flat="dynamic_filtering_reward_range",
    )
    dynamic_filtering_recheck: Optional[float] = opt(
        None,
        "With --dynamic_filtering: draw prompts by their history (GRESO): one whose last k groups in a row all "
        "scored alike is drawn with probability RECHECK**k (e.g. 0.25), so little generation is thrown away once "
        "most prompts are solved. Unset: every prompt is drawn",
        dotted="algo.dynamic_filtering_recheck",
    )


@dataclass(frozen=True)
class AlgorithmActor:
    """`actor` settings; AlgorithmConfig checks them."""

    eps_clip: float = opt(0.2, "PPO clip range (both sides unless --eps_clip_low_high)", dotted="actor.eps_clip")
    eps_clip_low_high: Optional[list[float]] = opt(
        None, "Asymmetric clip range: low high", dotted="actor.eps_clip_low_high"
    )
    dual_clip: Optional[float] = opt(None, "Dual-clip constant c > 1 for negative advantages", dotted="actor.dual_clip")
    entropy_coef: Optional[float] = opt(
        None,
        "Entropy bonus: the actor loss minus this times the mean entropy of the response tokens' next-token "
        "distributions (0: the entropy is only logged; unset: not computed)",
        dotted="actor.entropy_coef",
        flat="entropy_loss_coef",
    )
    policy_loss_type: str = opt(
        "ppo",
        "Actor objective: ppo (a ratio per token) or gspo (one ratio per sequence, "
        "GSPO; pair it with a small --eps_clip_low_high, e.g. 3e-4 4e-4)",
        choices=("ppo", "gspo"),
        dotted="actor.policy_loss_type",
    )


@dataclass(frozen=True)
class AlgorithmReward:
    """`reward` settings; AlgorithmConfig checks them."""

    stop_properly_penalty_coef: Optional[float] = opt(
        None,
        "ProRL's penalty for responses cut at the length limit (no eos): in [0, 1] their reward is multiplied "
        "by it; below 0 their reward is set to it (e.g. -0.5)",
        dotted="reward.stop_properly_penalty_coef",
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
    clip_range: list[float] = opt(
        [-10.0, 10.0], "Clip rewards to this range", dotted="reward.clip_range", flat="reward_clip_range"
    )


@dataclass(frozen=True)
class AlgorithmTrain:
    """`train` settings; AlgorithmConfig checks them."""

    enable_ema: bool = opt(
        False,
        "Keep an exponential moving average of the actor's weights (updated every optimizer "
        "step, in every checkpoint) and commit it beside the actor as <save_path>/ema/",
        dotted="train.enable_ema",
    )
    ema_beta: float = opt(
        0.992, "The average's decay: ema = beta * ema + (1 - beta) * weights", dotted="train.ema_beta"
    )


@dataclass(frozen=True)
class AlgorithmCritic:
    """`critic` settings; AlgorithmConfig checks them."""

    value_clip: float = opt(0.2, "Value clip range", dotted="critic.value_clip")
    model_name_or_path: Optional[str] = opt(
        None,
        "Critic initialisation (default: the reward model, as OpenRLHF)",
        path="model",
        dotted="critic.model_name_or_path",
        flat="critic_pretrain",
    )
    freezing_steps: int = opt(
        -1,
        "Train only the critic for this many iterations (critic warm-up)",
        dotted="critic.freezing_steps",
        flat="freezing_actor_steps",
    )
    save_value_network: bool = opt(
        False,
        "Also commit the trained critic beside the actor, as <save_path>/critic/ (a reward-model folder)",
        identity=False,
        dotted="critic.save_value_network",
    )


@dataclass(frozen=True)
class ActorAdam:
    """`actor.adam` settings; AlgorithmConfig checks them."""

    lr: float = opt(1e-6, "Actor peak learning rate", dotted="actor.adam.lr", flat="actor_learning_rate")


@dataclass(frozen=True)
class CriticAdam:
    """`critic.adam` settings; AlgorithmConfig checks them."""

    lr: float = opt(9e-6, "Critic peak learning rate", dotted="critic.adam.lr", flat="critic_learning_rate")


class AlgorithmConfig:
    """The checks of `Advantage` (`algo.advantage`), `KL` (`algo.kl`), `Algorithm` (`algo`), `AlgorithmActor` (`actor`),
    `AlgorithmReward` (`reward`), `AlgorithmTrain` (`train`), `AlgorithmCritic` (`critic`), `ActorAdam` (`actor.adam`),
    `CriticAdam` (`critic.adam`): a stage's `validate()` runs them, before anything loads."""

    def uses_critic(self) -> bool:
        return ESTIMATORS[self.algo.advantage.estimator].critic

    def loss_agg(self) -> str:
        return self.algo.loss_agg_mode or ESTIMATORS[self.algo.advantage.estimator].loss_agg

    def check_algorithm(self) -> None:
        if ESTIMATORS[self.algo.advantage.estimator].group:
            require(
                self.rollout.n_samples_per_prompt >= 2,
                f"--advantage_estimator {self.algo.advantage.estimator} compares the samples of one prompt: "
                f"--n_samples_per_prompt {self.rollout.n_samples_per_prompt} "
                f"gives nothing to compare; use >= 2 (e.g. 4)",
            )
        require(
            0 < self.algo.advantage.gamma <= 1 and 0 <= self.algo.advantage.lambd <= 1,
            f"--gamma {self.algo.advantage.gamma} must be in (0, 1] and --lambd {self.algo.advantage.lambd} in [0, 1]",
        )
        require(self.algo.kl.init_coef >= 0, f"--init_kl_coef {self.algo.kl.init_coef}: must be >= 0")
        require(self.actor.eps_clip > 0, f"--eps_clip {self.actor.eps_clip}: must be > 0")
        if self.actor.eps_clip_low_high is not None:
            require(
                len(self.actor.eps_clip_low_high) == 2 and all(e > 0 for e in self.actor.eps_clip_low_high),
                f"--eps_clip_low_high {self.actor.eps_clip_low_high}: give two positive numbers, low high",
            )
        if self.actor.dual_clip is not None:
            require(self.actor.dual_clip > 1, f"--dual_clip {self.actor.dual_clip}: must be > 1 (e.g. 3)")
        lo, hi = (self.reward.clip_range + [None, None])[:2]
        require(
            len(self.reward.clip_range) == 2 and lo < hi,
            f"--reward_clip_range {self.reward.clip_range}: give two numbers, low < high",
        )
        require(
            self.actor.adam.lr > 0 and self.critic.adam.lr > 0,
            "--actor_learning_rate and --critic_learning_rate must be > 0",
        )
        if self.reward.overlong_buffer_len is not None:
            require(
                0 < self.reward.overlong_buffer_len < self.rollout.max_new_tokens,
                f"--overlong_buffer_len {self.reward.overlong_buffer_len}: must be between 0 and --generate_max_len "
                f"{self.rollout.max_new_tokens} (the penalty starts that many tokens before the limit)",
            )
            require(
                self.reward.overlong_penalty_factor >= 0,
                f"--overlong_penalty_factor {self.reward.overlong_penalty_factor}: must be >= 0",
            )
