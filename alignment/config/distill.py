"""Distillation stages' configs: a frozen teacher (one group), and the two ways of learning from it —
knowledge distillation on a dataset's responses (`train_kd`) and on-policy distillation on the student's
own samples (`train_opd`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from alignment.config.base import opt, require
from alignment.config.engine_knobs import EngineKnobsData
from alignment.config.groups import Data, PromptFormat
from alignment.config.model import ModelData
from alignment.config.stages import SFTConfig
from alignment.config.tree import group, stage
from alignment.config.vision import VisionData


@dataclass(frozen=True)
class Teacher:
    """`teacher` settings; TeacherConfig checks them."""

    model_name_or_path: Optional[str] = opt(
        None,
        "The teacher: HF model directory, store URI or hub name, with the "
        "student's tokenizer (its vocabulary is checked before weights load)",
        path="model",
        dotted="teacher.model_name_or_path",
        flat="teacher_model",
    )
    offload: bool = opt(
        False,
        "Keep the frozen teacher in CPU memory (its forward runs there)",
        dotted="teacher.offload",
        flat="teacher_offload",
    )
    num_nodes: int = opt(
        0,
        "Put the teacher on its own Ray group of this many nodes x --teacher_num_gpus_per_node replicas, "
        "each rank asking one of them for its logits (0: every rank holds a copy of the teacher)",
        dotted="teacher.num_nodes",
        identity=False,
        flat="teacher_num_nodes",
    )
    num_gpus_per_node: int = opt(
        1,
        "Teacher replicas per node of its own group (one GPU, or one CPU, each)",
        dotted="teacher.num_gpus_per_node",
        identity=False,
        flat="teacher_num_gpus_per_node",
    )


class TeacherConfig:
    """The checks of `Teacher` (`teacher`): a stage's `validate()` runs them, before anything loads."""

    def check_teacher_model(self) -> None:
        require(
            bool(self.teacher.model_name_or_path),
            "--teacher_model is required: the model to distil from (a directory, s3:// URI or hub name)",
        )
        require(
            self.teacher.num_nodes >= 0 and self.teacher.num_gpus_per_node >= 1,
            f"--teacher_num_nodes {self.teacher.num_nodes} / --teacher_num_gpus_per_node "
            f"{self.teacher.num_gpus_per_node}: nodes >= 0 (0: a teacher on every rank), replicas per node >= 1",
        )
        require(
            not (self.teacher.num_nodes and self.teacher.offload),
            "--teacher_offload keeps each rank's copy of the teacher in CPU memory; with --teacher_num_nodes the "
            "teacher has its own Ray group instead: drop one of them",
        )


@dataclass(frozen=True)
class KD:
    """The `kd` settings only KD has."""

    kd_coef: float = opt(
        0.4,
        "loss = (1 - kd_coef) x NLL + kd_coef x KD, KD the cross-entropy of the student's "
        "next-token distribution against the teacher's (forward KL + the teacher's entropy)",
    )


@stage
class KDConfig(TeacherConfig, SFTConfig):
    """Knowledge distillation: SFT on the data plus the teacher's next-token distributions on the response
    tokens (`python -m alignment.cli.train_kd`)."""

    # SFT's groups, and these
    teacher = group(Teacher)
    kd = group(KD)

    def check_kd(self) -> None:
        require(
            0.0 <= self.kd.kd_coef <= 1.0,
            f"--kd_coef {self.kd.kd_coef}: must be in [0, 1] (0: plain SFT, 1: the teacher's distributions only)",
        )


@dataclass(frozen=True)
class OnPolicyData:
    """`data` settings; OnPolicyConfig checks them."""

    label_key: Optional[str] = opt(
        None,
        "JSON key of each prompt's reference answer: evaluation then also logs "
        "eval/label_match, the share of responses that contain it",
        dotted="data.label_key",
    )
    prompt_max_len: int = opt(
        1024, "Prompts longer than this (in tokens) are dropped, counted and reported", dotted="data.prompt_max_len"
    )


@dataclass(frozen=True)
class OnPolicyGenerate:
    """`generate` settings; OnPolicyConfig checks them."""

    max_new_tokens: int = opt(
        1024,
        "Most new tokens the student samples per prompt (responses are also cut so prompt + response <= --max_len)",
        dotted="generate.max_new_tokens",
        flat="generate_max_len",
    )
    temperature: float = opt(1.0, "Sampling temperature of the student's responses", dotted="generate.temperature")
    top_p: float = opt(
        1.0,
        "Nucleus sampling; must be 1.0 with --opd_topk 0 (the estimator needs the student's own distribution)",
        dotted="generate.top_p",
    )


@dataclass(frozen=True)
class OnPolicy:
    """`opd` settings; OnPolicyConfig checks them."""

    topk: int = opt(
        0,
        "0: reverse KL on the sampled tokens (a score-function estimator); K > 0: reverse KL "
        "over the student's top-K tokens at each position plus one bucket for the rest",
        dotted="opd.topk",
        flat="opd_topk",
    )
    kl_estimator: str = opt(
        "k3",
        "How the sampled-token KL is logged (k1, k2, k3); the gradient is the reverse-KL score function either way",
        choices=("k1", "k2", "k3"),
        dotted="opd.kl_estimator",
        flat="opd_kl_estimator",
    )
    kd_temperature: float = opt(
        1.0,
        "Softmax temperature of both models' logits in the top-K KL",
        dotted="opd.kd_temperature",
        flat="opd_kd_temperature",
    )


class OnPolicyConfig:
    """What the student samples and how the teacher grades it (OpenRLHF's --generate.* and --opd.*)."""

    def check_on_policy(self) -> None:
        require(
            self.data.prompt_max_len > 0 and self.generate.max_new_tokens > 0,
            f"--prompt_max_len {self.data.prompt_max_len} / "
            f"--generate_max_len {self.generate.max_new_tokens}: must be > 0",
        )
        require(self.generate.temperature > 0, f"--temperature {self.generate.temperature}: must be > 0")
        require(0 < self.generate.top_p <= 1, f"--top_p {self.generate.top_p}: must be in (0, 1]")
        require(self.opd.topk >= 0, f"--opd_topk {self.opd.topk}: must be >= 0 (0: the sampled tokens only)")
        require(
            self.opd.topk > 0 or self.generate.top_p == 1.0,
            f"--top_p {self.generate.top_p} with --opd_topk 0: the sampled-token estimator needs samples from the "
            f"student's whole distribution; use --top_p 1.0 or --opd_topk K",
        )
        require(self.opd.kd_temperature > 0, f"--opd_kd_temperature {self.opd.kd_temperature}: must be > 0")


@dataclass(frozen=True)
class OPDData(OnPolicyData, VisionData, EngineKnobsData, Data, PromptFormat, ModelData):
    pass


@stage
class OPDConfig(OnPolicyConfig, TeacherConfig, SFTConfig):
    """On-policy distillation (`python -m alignment.cli.train_opd`): the student samples responses to the
    prompts of --dataset and learns to lower its reverse KL to the teacher on them."""

    dotted_family: ClassVar[str] = "opd"  # --data.prompt_dataset names --dataset here

    # SFT's groups, but for these
    data = group(OPDData)
    teacher = group(Teacher)
    generate = group(OnPolicyGenerate)
    opd = group(OnPolicy)

    def check_opd(self) -> None:
        require(
            not self.data.output_key and not self.data.multiturn and not self.model.pretrain_mode_enable,
            "--output_key, --multiturn and --pretrain_mode are SFT flags; on-policy distillation reads prompts "
            "(--input_key) and trains on the student's own responses",
        )
        require(
            not self.ds.packing_samples,
            "--packing_samples: not built for train_opd (its sequences are made each step); drop the flag",
        )
        require(
            self.data.prompt_max_len < self.data.max_len,
            f"--prompt_max_len {self.data.prompt_max_len} must be "
            f"below --max_len {self.data.max_len} (prompt + response)",
        )
