"""A distillation's teacher on its own Ray group (`--teacher_num_nodes`): the replica each rank asks for its
logits, and the side group the `train_kd` and `train_opd` drivers place with their ranks
(alignment/distributed/side_groups.py). Without the flag every rank holds its own copy (trainers/reference.py)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from alignment.config.distill import KDConfig, OPDConfig
from alignment.distributed.side_groups import SideGroup

if TYPE_CHECKING:
    import torch

    from alignment.datasets.batch import Batch


class TeacherReplica:
    """One replica (a Ray actor on its own bundle): the frozen teacher, loaded as a rank-local one is (same
    precision and attention flags), answering a micro-batch with its [B, T, V] logits."""

    def __init__(self, path: str, bf16: bool, attention: str, trust_remote_code: bool):
        # the replica's own process imports the model code; the driver that places it stays light
        import ray
        import torch

        from alignment.logs import setup_logging
        from alignment.models.precision import attn_implementation, precision_for
        from alignment.trainers.reference import ReferenceModel

        setup_logging(force=True)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cpu" and ray.is_initialized():  # its bundle's cores, not the node's: ranks compute beside it
            assigned = int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))
            torch.set_num_threads(max(1, min(assigned, len(os.sched_getaffinity(0)))))  # nor more than it may run on
        precision, attn = precision_for(bf16, device), attn_implementation(attention, device)
        self.teacher = ReferenceModel(path, precision.dtype, attn, device, False, "--teacher_model", trust_remote_code)

    def logits(self, batch: Batch) -> torch.Tensor:
        return self.teacher.logits(batch).cpu()


def teacher_side(cfg: KDConfig | OPDConfig) -> SideGroup | None:
    """The teacher's group when `--teacher_num_nodes` asks for one (a KD or OPD config), else None."""
    teacher = cfg.teacher
    if not teacher.num_nodes:
        return None
    kwargs = {
        "path": teacher.model_name_or_path,
        "bf16": cfg.ds.bf16,
        "attention": cfg.attention(),
        "trust_remote_code": cfg.model.trust_remote_code,
    }
    return SideGroup("teacher", teacher.num_nodes, teacher.num_gpus_per_node, TeacherReplica, kwargs)
