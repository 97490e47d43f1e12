"""Where a stage's outputs go, compared with its inputs and each other before anything loads.

Pure and cheap: string work on URIs, and for local paths one stat each. A store URI is never
contacted here (the CLI's preflight reaches the store once, after the flags are checked).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from alignment.config.base import path_fields, require

# the outputs that are one committed folder each (a checkpoint folder has rules of its own: check_checkpoint)
COMMITTED_OUTPUTS = ("save_path", "output_path")


@dataclass(frozen=True)
class Outputs:
    """Where a stage writes, whatever its kind: what the CLIs' preflight, the lease, an interrupt's line and
    the model card ask of a config."""

    flag: str  # the flag naming what the stage commits: "--save_path" or "--output_path"
    uri: str | None
    ckpt: str | None  # --ckpt_path of a training stage
    checkpoints: bool  # the run commits checkpoints (--save_steps or --save_minutes, DeepSpeed's not disabled)

    def stores(self) -> list[tuple[str, str]]:
        return [(flag, uri) for flag, uri in ((self.flag, self.uri), ("--ckpt_path", self.ckpt)) if uri]


def _remote(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")


def normalized(uri: str) -> str:
    """One spelling per location: local paths absolute with symlinks resolved, store URIs as
    scheme://bucket/key with repeated and trailing slashes dropped (s3a:// is s3://)."""
    if _remote(uri):
        scheme, rest = uri.split("://", 1)
        scheme = "s3" if scheme.lower() == "s3a" else scheme.lower()
        return f"{scheme}://{re.sub('/+', '/', rest).strip('/')}"
    return os.path.realpath(os.path.expanduser(uri.removeprefix("file://")))


def within(inner: str, outer: str) -> bool:
    """`inner` is the location `outer` or lies inside it (by path components: ./out2 is not in ./out)."""
    a, b = normalized(inner), normalized(outer)
    return a == b or a.startswith(b.rstrip("/") + "/")


def local_file(uri: str | None) -> bool:
    """A local path that exists and is not a directory (a regular file, a device...)."""
    return bool(uri) and not _remote(uri) and os.path.exists(normalized(uri)) and not os.path.isdir(normalized(uri))


def not_a_checkpoint_folder(uri: str) -> bool:
    """A local folder holding something, but no `global_step*` checkpoint and no `latest` pointer
    (alignment/training/checkpoint.py's layout): resuming from it would find nothing and start over.
    Hidden entries don't count (a half-written pointer's temporary file)."""
    if _remote(uri):
        return False
    path = Path(normalized(uri))
    if not path.is_dir():
        return False
    names = [p.name for p in path.iterdir() if not p.name.startswith(".")]
    return bool(names) and not any(n == "latest" or n.startswith("global_step") for n in names)


def is_checkpoint_folder(path: Path) -> bool:
    """A local folder in alignment/training/checkpoint.py's layout: it holds `global_step*` or `latest`."""
    return path.is_dir() and any(c.name == "latest" or c.name.startswith("global_step") for c in path.iterdir())


def foreign_folder(uri: str) -> str | None:
    """What a local folder at `uri` holds when it is not one of our committed outputs (no MANIFEST.json) and
    not empty: the commit replaces the whole folder, so it would delete them. None otherwise. A checkpoint
    folder inside it (OpenRLHF's `--ckpt.path <save>/ckpt`) or an empty folder does not count: the commit
    carries checkpoint folders over into the new output (alignment/outputs.py)."""
    if _remote(uri):
        return None
    path = Path(normalized(uri))
    if not path.is_dir() or (path / "MANIFEST.json").exists():
        return None
    carried = [p for p in path.iterdir() if p.is_dir() and (is_checkpoint_folder(p) or not any(p.iterdir()))]
    names = sorted(p.name for p in path.iterdir() if p not in carried)
    return f"{len(names)} entries ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})" if names else None


def check_output_folder(flag: str, out: str) -> None:
    """A committed output replaces the whole folder: it is never blank (the working directory), nor the
    working directory or a folder above it (and, check_not_foreign, never a folder of the user's that is not
    an output of ours)."""
    require(out.strip() != "", f"--{flag} {out!r}: empty; pass the folder the output is committed as")
    require(
        _remote(out) or not within(os.getcwd(), out),
        f"--{flag} {out}: is the working directory or holds it; the commit replaces that whole folder: pass a "
        f"new folder, e.g. --{flag} ./{Path(normalized(out)).name or 'output'}_model",
    )


def check_not_foreign(flag: str, out: str) -> None:
    held = foreign_folder(out)
    require(
        held is None,
        f"--{flag} {out}: an existing folder that is not a committed output (no MANIFEST.json) holds {held}; "
        f"the commit would replace it and delete them: pass a new or empty folder",
    )


def check_output_paths(cfg: object) -> None:
    """Every committed output (--save_path, --output_path) is a folder that is safe to replace
    (check_output_folder), and the commit, which replaces that whole folder, would delete no model the
    run reads (--pretrain, --ref_pretrain, ...)."""
    models = {name: getattr(cfg, name) for name, what in path_fields(cfg).items() if what == "model"}
    for out_name in COMMITTED_OUTPUTS:
        out = getattr(cfg, out_name, None)
        if out is None:
            continue
        check_output_folder(out_name, out)
        require(
            not local_file(out),
            f"--{out_name} {out}: is a file; pass a directory path (the output is a folder, committed as a whole)",
        )
        for name, value in models.items():
            for model in (value or "").split(","):
                require(
                    not model or not within(model, out),
                    f"--{out_name} {out}: holds --{name} {model}; the commit replaces the whole --{out_name} "
                    f"folder, which would delete that model: pass another --{out_name}",
                )
        check_not_foreign(out_name, out)


def check_checkpoint_folder(ckpt: str, save: str, resumes: bool) -> None:
    """--ckpt_path of a run that writes or reads checkpoints: not holding --save_path (directly inside it is
    fine), a folder, and with --load_checkpoint (`resumes`) one that holds checkpoints or nothing yet."""
    require(ckpt.strip() != "", f"--ckpt_path {ckpt!r}: empty; pass the folder checkpoints are committed in")
    require(
        not within(save, ckpt),
        f"--save_path {save} lies in --ckpt_path {ckpt}: a checkpoint folder must not hold the model: pass "
        f"separate folders, e.g. --ckpt_path {save.rstrip('/')}/ckpt (as OpenRLHF does) or {save.rstrip('/')}_ckpt",
    )
    # inside the output (OpenRLHF's `--ckpt.path <save>/ckpt`, our default ./ckpt/checkpoints): the commit
    # carries a checkpoint folder that is a direct child of the output over into the new output
    require(
        not within(ckpt, save) or normalized(ckpt).rstrip("/").rsplit("/", 1)[0] == normalized(save).rstrip("/"),
        f"--ckpt_path {ckpt} lies deeper inside --save_path {save}: put it directly inside (e.g. "
        f"{save.rstrip('/')}/ckpt) or outside it; the commit carries only a folder directly inside over",
    )
    require(not local_file(ckpt), f"--ckpt_path {ckpt}: is a file; pass a directory path for the checkpoints")
    require(
        not (resumes and not_a_checkpoint_folder(ckpt)),
        f"--ckpt_path {ckpt}: is not a checkpoint folder (it holds files but no global_step* folder or 'latest'); "
        f"--load_checkpoint resumes from a folder earlier runs checkpointed into: fix the path, or pass a new "
        f"folder to start over",
    )
