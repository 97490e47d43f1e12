"""Knowledge distillation (OpenRLHF's train_kd): SFT's data, loop, checkpoints and commit, with a frozen
teacher's next-token distributions mixed into the loss (the math: alignment.losses.kd)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import ray
import torch
from transformers import AutoConfig, AutoTokenizer

from alignment.config.base import ConfigError
from alignment.config.distill import KDConfig, OPDConfig, Teacher
from alignment.datasets.batch import Batch
from alignment.distributed.side_groups import my_replica
from alignment.losses.kd import kd_loss
from alignment.models.builder import ModelSetup
from alignment.models.loading import _hub_error, has_tokenizer, resolve_model_path
from alignment.trainers.reference import ReferenceModel
from alignment.trainers.sft import SFTTrainer

if TYPE_CHECKING:
    from ray.actor import ActorHandle

log = logging.getLogger(__name__)


class KDTrainer(SFTTrainer):
    stage = "kd"

    def __init__(self, *args, teacher: ReferenceModel | RemoteTeacher, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher = teacher

    def objective(self, logits: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        terms = kd_loss(logits, self.teacher.logits(batch), batch.input_ids, batch.loss_mask, self.cfg.kd.kd_coef)
        # OpenRLHF's names for the two parts; kd_kl is the part the student can still close
        return terms.loss, {"gpt_loss": terms.nll.item(), "distil_loss": terms.distil.item(), "kd_kl": terms.kl.item()}


def check_teacher(cfg: KDConfig | OPDConfig) -> str:
    """The teacher's local path, once its vocabulary is the student's: the same size in config.json and,
    where both folders hold a tokenizer, the same token ids. Reads configs and tokenizers, no weights."""
    student = resolve_model_path(cfg.model.model_name_or_path, revision=cfg.model.revision)
    teacher = resolve_model_path(cfg.teacher.model_name_or_path, "--teacher_model")
    sizes = [
        _vocab_size(path, flag, cfg.model.trust_remote_code)
        for path, flag in ((student, "--pretrain"), (teacher, "--teacher_model"))
    ]
    if sizes[0] != sizes[1]:
        raise ConfigError(
            f"--teacher_model {cfg.teacher.model_name_or_path}: a vocabulary of {sizes[1]} tokens, --pretrain "
            f"{cfg.model.model_name_or_path} has {sizes[0]}; distillation compares the two models' next-token "
            f"distributions token by token: pick a teacher with the student's tokenizer"
        )
    if all(has_tokenizer(p) for p in (student, teacher)):
        ids = [_token_ids(p, cfg.model.trust_remote_code) for p in (student, teacher)]
        differ = sorted(t for t in ids[0].keys() | ids[1].keys() if ids[0].get(t) != ids[1].get(t))
        if differ:
            t = differ[0]
            raise ConfigError(
                f"--teacher_model {cfg.teacher.model_name_or_path}: its tokenizer differs from --pretrain "
                f"{cfg.model.model_name_or_path}'s ({len(differ)} tokens, e.g. {t!r}: id {ids[1].get(t)} there, "
                f"{ids[0].get(t)} here); distillation needs the same token ids: pick a teacher with "
                f"the student's tokenizer"
            )
    return teacher


class RemoteTeacher:
    """This rank's replica of a teacher on its own Ray group (--teacher_num_nodes), asked for its logits."""

    def __init__(self, replica: ActorHandle):
        self.replica = replica

    @torch.no_grad()
    def logits(self, batch: Batch) -> torch.Tensor:
        """[B, T, V] logits, on the batch's device (the micro-batch travels on the CPU)."""

        return ray.get(self.replica.logits.remote(batch.to("cpu"))).to(batch.input_ids.device)


def teacher_for(teacher: Teacher, path: str, setup: ModelSetup, device: str) -> ReferenceModel | RemoteTeacher:
    """The teacher's replica where the stage placed a teacher group, else this rank's own copy."""
    replica = my_replica("teacher")
    if replica is not None:
        log.info("teacher: a replica of its own Ray group (--teacher_num_nodes %d)", teacher.num_nodes)
        return RemoteTeacher(replica)
    return ReferenceModel(
        path, setup.precision.dtype, setup.attn, device, teacher.offload, "--teacher_model", setup.trust_remote_code
    )


def _vocab_size(path: str, flag: str, trust_remote_code: bool) -> int:
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except OSError as e:
        raise _hub_error(path, flag, e) from e
    return config.get_text_config().vocab_size


def _token_ids(path: str, trust_remote_code: bool) -> dict[str, int]:
    return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code).get_vocab()
