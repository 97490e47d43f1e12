"""The PPO family's config (`python -m alignment.cli.train_ppo_ray`): its groups as OpenRLHF's dotted flags
name them (the algorithm's: config/algorithm.py; rollout: config/rollout.py; placement: config/placement.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from alignment.config.agent import Agent, AgentConfig
from alignment.config.algorithm import (
    KL,
    ActorAdam,
    Advantage,
    Algorithm,
    AlgorithmActor,
    AlgorithmConfig,
    AlgorithmCritic,
    AlgorithmReward,
    AlgorithmTrain,
    CriticAdam,
)
from alignment.config.async_train import (
    AsyncRollout,
    AsyncTrain,
    AsyncTrainConfig,
    DynamicBatch,
    DynamicBatchConfig,
    DynamicBatchRollout,
)
from alignment.config.base import require
from alignment.config.checkpoints import CheckpointConfig, Checkpoints
from alignment.config.engine_knobs import EngineKnobs, EngineKnobsData, EngineKnobsTrain
from alignment.config.groups import LoraConfig, LoraSaveConfig, Packing, PromptFormat
from alignment.config.is_correction import ISCorrection, ISCorrectionConfig
from alignment.config.model import Model, ModelConfig, ModelData, ModelDS
from alignment.config.placement import (
    PlacementActor,
    PlacementConfig,
    PlacementCritic,
    PlacementRef,
    PlacementReward,
    PlacementTrain,
    Role,
)
from alignment.config.rewards import RewardSource, RewardSourceConfig, RewardSourceDS
from alignment.config.rollout import (
    Rollout,
    RolloutCkpt,
    RolloutConfig,
    RolloutData,
    RolloutEval,
    RolloutTrain,
    RolloutVLLM,
)
from alignment.config.runs import Adam, MoE, MoEConfig, Muon, Train, TrainConfig, TrainDS
from alignment.config.sleep import SleepConfig, SleepDS, SleepVLLM
from alignment.config.stages import Logger, StageConfig, TrainedLora
from alignment.config.tracking import EvalCadence, LoggingConfig
from alignment.config.tree import group, stage, subgroup
from alignment.config.vision import VisionActor, VisionConfig, VisionData
from alignment.losses.estimators import ESTIMATORS


@dataclass(frozen=True)
class PPOModel(MoE, Model):
    pass


@dataclass(frozen=True)
class PPODS(TrainDS, EngineKnobs, SleepDS, RewardSourceDS, Packing, ModelDS):
    lora: TrainedLora = subgroup(TrainedLora)


@dataclass(frozen=True)
class PPOData(EngineKnobsData, VisionData, RolloutData, PromptFormat, ModelData):
    pass


@dataclass(frozen=True)
class PPOActor(AlgorithmActor, VisionActor, PlacementActor):
    adam: ActorAdam = subgroup(ActorAdam)


@dataclass(frozen=True)
class PPOCritic(AlgorithmCritic, PlacementCritic):
    adam: CriticAdam = subgroup(CriticAdam)


@dataclass(frozen=True)
class PPOReward(AlgorithmReward, RewardSource, PlacementReward):
    pass


@dataclass(frozen=True)
class PPOTrain(Train, EngineKnobsTrain, AlgorithmTrain, Agent, AsyncTrain, DynamicBatch, RolloutTrain, PlacementTrain):
    pass


@dataclass(frozen=True)
class PPOEval(EvalCadence, RolloutEval):
    pass


@dataclass(frozen=True)
class PPOCkpt(Checkpoints, RolloutCkpt):
    pass


@dataclass(frozen=True)
class PPORollout(AsyncRollout, DynamicBatchRollout, Rollout):
    pass


@dataclass(frozen=True)
class PPOVLLM(SleepVLLM, RolloutVLLM):
    pass


@dataclass(frozen=True)
class PPOAlgoAdvantage(ISCorrection, Advantage):
    pass


@dataclass(frozen=True)
class PPOAlgo(Algorithm):
    advantage: PPOAlgoAdvantage = subgroup(PPOAlgoAdvantage)
    kl: KL = subgroup(KL)


@stage
class PPOConfig(
    ISCorrectionConfig,
    LoggingConfig,
    CheckpointConfig,
    MoEConfig,
    TrainConfig,
    LoraConfig,
    LoraSaveConfig,
    AlgorithmConfig,
    AgentConfig,
    SleepConfig,
    RewardSourceConfig,
    AsyncTrainConfig,
    DynamicBatchConfig,
    VisionConfig,
    RolloutConfig,
    PlacementConfig,
    ModelConfig,
    StageConfig,
):
    """PPO / REINFORCE++ / RLOO / GRPO on Ray (`python -m alignment.cli.train_ppo_ray`)."""

    # OpenRLHF's dotted names call the policy `actor` here (--actor.model_name_or_path), `model` elsewhere
    dotted_family: ClassVar[str] = "ppo"

    model = group(PPOModel)
    ds = group(PPODS)
    data = group(PPOData)
    actor = group(PPOActor)
    critic = group(PPOCritic)
    ref = group(PlacementRef)
    reward = group(PPOReward)
    train = group(PPOTrain)
    eval = group(PPOEval)
    ckpt = group(PPOCkpt)
    rollout = group(PPORollout)
    vllm = group(PPOVLLM)
    algo = group(PPOAlgo)
    adam = group(Adam)
    muon = group(Muon)
    logger = group(Logger)

    running_reward_norm: ClassVar[bool] = True

    def placed_roles(self) -> list[Role]:
        """actor and ref always; a critic for GAE only; reward models unless the reward comes from
        --remote_rm_url (a server or a reward_func file runs in the driver)."""
        return [
            Role.ACTOR,
            *([Role.CRITIC] if self.uses_critic() else []),
            Role.REF,
            *([Role.REWARD] if self.reward.model_name_or_path and not self.reward.remote_url else []),
        ]

    def check_learning_rates(self) -> None:
        require(  # the shared --learning_rate would be accepted and ignored: each role's engine has its own rate
            self.adam.lr == self.__dataclass_fields__["learning_rate"].default,
            f"--learning_rate {self.adam.lr}: PPO trains each model at its own rate; pass "
            f"--actor_learning_rate (--actor.adam.lr) and, with a critic, --critic_learning_rate (--critic.adam.lr)",
        )

    def check_ppo(self) -> None:
        samples = self.rollout.samples  # both global: a fact of the flags, whatever the world size
        require(
            samples % self.train.batch_size == 0,
            f"--rollout_batch_size {self.rollout.batch_size} x --n_samples_per_prompt "
            f"{self.rollout.n_samples_per_prompt} = {samples} samples per iteration is not a multiple of "
            f"--train_batch_size {self.train.batch_size}",
        )
        if self.train.enable_ema:
            require(
                self.ds.tensor_parallel_size == 1,
                "--enable_ema averages the whole actor on every rank; --ds_tensor_parallel_size shards it: "
                "use --ds_tensor_parallel_size 1 or drop --enable_ema",
            )
            require(0 < self.train.ema_beta < 1, f"--ema_beta {self.train.ema_beta}: must be in (0, 1), e.g. 0.992")
            require(
                self.ds.zero_stage != 3,
                "--enable_ema averages the whole actor on every rank; ZeRO-3 partitions it: "
                "use --zero_stage 0-2 or drop --enable_ema",
            )
        if self.algo.dynamic_filtering_enable:
            # as OpenRLHF: any estimator, since the filter reads the scores of one prompt's samples, not the
            # advantages (REINFORCE++ gains 12 points with it, 5 without: docs/learning.md)
            require(
                self.rollout.n_samples_per_prompt >= 2,
                f"--dynamic_filtering keeps the prompts whose samples' scores differ: --n_samples_per_prompt "
                f"{self.rollout.n_samples_per_prompt} gives one score a prompt; use >= 2 (e.g. 8)",
            )
            lo_hi = self.algo.dynamic_filtering_range
            require(
                len(lo_hi) == 2 and lo_hi[0] < lo_hi[1],
                f"--dynamic_filtering_reward_range {lo_hi}: give two numbers, LOW < HIGH (e.g. 0 1)",
            )

    def check_ppo_signal(self) -> None:
        """What the learning signal is made of: the filter's re-checks, whitening, the stop penalty, the reward
        source, the critic. Runs after check_ppo (checks run in name order), as it did when they were one."""
        recheck = self.algo.dynamic_filtering_recheck
        require(
            recheck is None or (self.algo.dynamic_filtering_enable and 0 <= recheck <= 1),
            f"--dynamic_filtering_recheck {recheck}: a probability in [0, 1] (e.g. 0.25), with --dynamic_filtering",
        )
        require(
            not self.algo.advantage.no_std_norm or ESTIMATORS[self.algo.advantage.estimator].whiten,
            f"--no_std_norm changes how advantages are whitened; --advantage_estimator {self.algo.advantage.estimator} "
            f"keeps its group scale and whitens nothing: drop the flag",
        )
        if self.reward.stop_properly_penalty_coef is not None:
            require(
                self.reward.stop_properly_penalty_coef <= 1,
                f"--stop_properly_penalty_coef {self.reward.stop_properly_penalty_coef}: in [0, 1] scales a cut "
                f"response's reward, below 0 replaces it; above 1 would reward running out of tokens",
            )
        require(
            self.has_reward() or bool(self.train.agent_func_path),
            "no reward: pass --reward_pretrain (a trained RM), --remote_rm_url (a server URL or a reward_func .py "
            "file) or --agent_func_path (an environment that gives rewards)",
        )
        if self.uses_critic():
            return
        # critic-free estimators: OpenRLHF places no critic then; a critic flag is a mistake worth naming
        require(
            not self.critic.save_value_network,
            f"--save_value_network: --advantage_estimator {self.algo.advantage.estimator} trains no critic; drop it",
        )
        require(
            self.critic.model_name_or_path is None,
            f"--critic_pretrain is set but --advantage_estimator {self.algo.advantage.estimator} uses no critic; "
            f"drop it or use --advantage_estimator gae",
        )
