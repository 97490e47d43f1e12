"""Where a stage writes: its final model (--save_path) and its resumable checkpoints (--ckpt_path), their
cadence and retention. OpenRLHF's flat names (dotted: --ckpt.*)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from alignment.config.base import opt, require
from alignment.config.paths import check_checkpoint_folder


@dataclass(frozen=True)
class Checkpoints:
    """`ckpt` settings; CheckpointConfig checks them."""

    output_dir: str = opt(
        "./ckpt",
        "Where the final HF-format model goes (local path or s3://)",
        identity=False,
        dotted="ckpt.output_dir",
        flat="save_path",
    )
    save_steps: int = opt(
        -1,
        "Commit a resumable checkpoint every N optimizer steps (-1: none by step count)",
        identity=False,
        dotted="ckpt.save_steps",
    )
    save_minutes: float = opt(
        0.0,
        "Also commit a resumable checkpoint once this many minutes have passed since the "
        "last one (0: off). A flow stage with neither set checkpoints every 30 minutes",
        identity=False,
    )
    path: str = opt(
        "./ckpt/checkpoints",
        "Where resumable checkpoints go (local path or s3://)",
        identity=False,
        dotted="ckpt.path",
        flat="ckpt_path",
    )
    load_enable: bool = opt(
        False,
        "Resume from the newest committed checkpoint under --ckpt_path",
        identity=False,
        dotted="ckpt.load_enable",
        flat="load_checkpoint",
    )
    max_num: int = opt(
        3, "Keep this many resumable checkpoints", identity=False, dotted="ckpt.max_num", flat="max_ckpt_num"
    )
    max_mem: Optional[float] = opt(
        None,
        "Also keep the checkpoints within this many GB, deleting the oldest first (the newest always stays; "
        "unset: no limit)",
        identity=False,
        dotted="ckpt.max_mem",
        flat="max_ckpt_mem",
    )
    disable_ds: bool = opt(
        False,
        "Don't write resumable checkpoints (final model only)",
        identity=False,
        dotted="ckpt.disable_ds",
        flat="disable_ds_ckpt",
    )
    save_hf: bool = opt(
        False,
        "Also save an HF-format copy of the model (PPO: the actor) in every checkpoint, "
        "as <ckpt>/global_step<N>/<role>/hf/, committed and verified with it",
        identity=False,
        dotted="ckpt.save_hf",
        flat="save_hf_ckpt",
    )


class CheckpointConfig:
    """The checks of `Checkpoints` (`ckpt`): a stage's `validate()` runs them, before anything loads."""

    def check_checkpoint(self) -> None:
        require(self.ckpt.max_num >= 1, f"--max_ckpt_num {self.ckpt.max_num}: must be >= 1")
        require(
            self.ckpt.max_mem is None or self.ckpt.max_mem > 0, f"--max_ckpt_mem {self.ckpt.max_mem}: must be > 0 (GB)"
        )
        require(
            self.ckpt.save_steps == -1 or self.ckpt.save_steps > 0,
            f"--save_steps {self.ckpt.save_steps}: use -1 or a positive number",
        )
        require(
            self.ckpt.save_minutes >= 0, f"--save_minutes {self.ckpt.save_minutes}: use 0 (off) or a positive number"
        )
        # OpenRLHF's defaults nest ./ckpt/checkpoints in ./ckpt: harmless for a run that never checkpoints
        if (
            self.ckpt.save_steps > 0 or self.ckpt.save_minutes > 0 or self.ckpt.load_enable
        ) and not self.ckpt.disable_ds:
            check_checkpoint_folder(self.ckpt.path, self.ckpt.output_dir, self.ckpt.load_enable)
