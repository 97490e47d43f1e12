"""The external trackers a stage can log to: Weights & Biases and TensorBoard (rank 0 only).

wandb: a run named by --wandb_run_name in --wandb_group. A run that resumes from a checkpoint
(--load_checkpoint) continues the same wandb run: its id is derived from --ckpt_path, so the
curve of a stage that crashed and resumed is one run, not two. (wandb keeps the highest step it
has seen: steps redone after a resume, below that, are dropped by wandb itself.)

TensorBoard: events under --use_tensorboard. A directory inside --save_path is written into the
model's staging directory, so the events are committed with the model and survive the node
(`tensorboard --logdir <store>` then sees every stage); they are rebuilt from the metrics
history on resume, so the committed events hold one whole curve.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from alignment import storage
from alignment.config.base import public_dict
from alignment.config.tracking import TRACKING_ENV, WANDB_SWITCHES, LoggingConfig

if TYPE_CHECKING:
    from wandb import Run


def wandb_run_id(resume_key: str) -> str:
    """A stable wandb run id (wandb allows [a-z0-9], up to 64 characters) for one resumable run."""
    return hashlib.sha256(resume_key.encode()).hexdigest()[:16]


def start_wandb(cfg: LoggingConfig, stage: str) -> tuple[Run, str]:
    """The wandb run and where to find it (its URL, or its offline directory to `wandb sync`)."""
    import wandb

    key = cfg.logger.wandb.key
    switch = key.lower() in WANDB_SWITCHES
    if not switch:
        # A key in the config (a YAML --config, or main(argv) called in-process; on the command line
        # run_main already moved it to WANDB_API_KEY): into this process's environment
        # (wandb.login(key=...) would also write it to ~/.netrc), and out of sys.argv, which wandb
        # records in its run files.
        os.environ["WANDB_API_KEY"] = key
        sys.argv = ["***" if arg == key else arg.replace("=" + key, "=***") for arg in sys.argv]
    if key.lower() == "offline" or os.environ.get("WANDB_MODE") == "offline":
        os.environ["WANDB_MODE"] = "offline"  # no network or no key: log locally, sync later
    else:
        wandb.login()  # the key comes from WANDB_API_KEY (how pipelines pass it: never as a parameter)
    resume = {"id": wandb_run_id(cfg.ckpt.path), "resume": "allow"} if cfg.ckpt.load_enable else {}
    run = wandb.init(
        entity=cfg.logger.wandb.org,
        project=cfg.logger.wandb.project,
        group=cfg.logger.wandb.group,
        name=cfg.logger.wandb.run_name or stage,
        config={k: v for k, v in public_dict(cfg).items() if k != "use_wandb"},  # fields only, secrets masked
        reinit="finish_previous",
        **resume,
    )
    where = run.url or str(Path(run.dir).parent)  # offline: .../wandb/offline-run-<time>-<id>
    if not run.url and os.environ.get(TRACKING_ENV):  # where close() will keep it (keep_offline_run)
        where = f"{os.environ[TRACKING_ENV].rstrip('/')}/wandb/{Path(run.dir).parent.name}"
    return run, where


def keep_offline_run(run: Run) -> None:
    """After wandb.finish(): an offline run's folder copied to TRACKING_ENV's location (a flow stage's folder
    in the store, beside its model), committed there like any output. Its own folder lives in the job's
    working directory, which an embedded Ray head deletes with the flow; the model card names the copy."""
    if run.url or not os.environ.get(TRACKING_ENV):
        return
    local = Path(run.dir).parent
    storage.commit_dir(local, f"{os.environ[TRACKING_ENV].rstrip('/')}/wandb/{local.name}", {"wandb": "offline run"})


def tensorboard_inside_model(cfg: LoggingConfig) -> str | None:
    """The path of --use_tensorboard relative to --save_path, when it lies inside it."""
    target, inside = cfg.logger.tensorboard_dir.rstrip("/"), cfg.ckpt.output_dir.rstrip("/") + "/"
    return target[len(inside) :] if target.startswith(inside) else None


class TensorBoard:
    def __init__(self, cfg: LoggingConfig, run_dir: Path, stage: str):
        from torch.utils.tensorboard import SummaryWriter

        rel = tensorboard_inside_model(cfg)
        if rel:
            directory = run_dir / rel
            self.where, self.ours = cfg.logger.tensorboard_dir.rstrip("/"), True
            shutil.rmtree(directory, ignore_errors=True)  # ours: rebuilt from the resumed history by replay()
        else:  # the user's own directory (OpenRLHF's layout: one folder per run name): appended to
            directory = Path(cfg.logger.tensorboard_dir) / (cfg.logger.wandb.run_name or stage)
            self.where, self.ours = str(directory), False
        directory.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(str(directory))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)

    def replay(self, rows: list[dict]) -> None:
        """A resumed run's history, written again into our fresh directory (a user's own
        directory kept the first attempt's events: nothing to add there)."""
        if not self.ours:
            return
        for row in rows:
            self.log(row["step"], {k: v for k, v in row.items() if k not in ("step", "time")})
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
