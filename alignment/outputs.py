"""A stage's final output: built in a staging directory, then committed over --save_path in one step.

Every stage writes its output through one context, `StagedOutput`:

    # out.dir: where files go (None: this rank writes none)
    with StagedOutput(cfg.ckpt.output_dir, writes=rt.is_main) as out:
        ...                                                         # train, log metrics into out.dir
        out.commit(metadata)                                        # (models: saving.commit_model)
    # leaving the block without a commit (an exception) removes out.dir; the committed output stays

A committed model at --save_path stays committed, intact, until the new one replaces it: training
never writes into --save_path. On a local path the staged directory (a hidden sibling, so on the
same filesystem) gets its MANIFEST.json and is then swapped with the old one by one atomic
`renameat2(RENAME_EXCHANGE)`; a crash at any point leaves either the old committed model or the new
one. Object stores have no directory rename: there the new files go to a new version folder and one
PUT of MANIFEST.json switches to it (storage.commit_dir), so the old model stays committed until then.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import logging
import os
import shutil
import socket
import tempfile
import uuid
from pathlib import Path

from alignment import lease, storage
from alignment.config.base import ConfigError
from alignment.config.paths import foreign_folder, is_checkpoint_folder

log = logging.getLogger(__name__)

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def local_path(uri: str) -> Path:
    return Path(os.path.abspath(os.path.expanduser(uri.removeprefix("file://"))))


def _host() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _remove_dead_leftovers(dest: Path) -> None:
    """Staging directories of runs on this host that died before their commit (killed, OOM)."""
    for old in dest.parent.glob(f".{dest.name}.staging-{_host()}-*"):
        pid = int(old.name.rsplit("-", 2)[-2])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            for folder in _checkpoint_folders(old):  # moved in by a commit that died before its swap: back
                if not (dest / folder.name).exists():
                    dest.mkdir(parents=True, exist_ok=True)
                    os.rename(folder, dest / folder.name)
                    log.warning("moved the checkpoints %s back to %s", folder, dest / folder.name)
            log.info("removing %s: left by process %d, which died before its commit", old, pid)
            shutil.rmtree(old, ignore_errors=True)
        except PermissionError:  # alive, someone else's
            pass


def _refuse_file(dest: Path) -> None:
    """The output is a folder: a file at `dest` (or at a folder above it) is the user's, and the swap
    would move it aside as a hidden staging name, so it is refused before anything is built."""
    for path in (dest, *dest.parents):
        if path.exists():
            if not path.is_dir():
                raise ConfigError(
                    f"output path {dest}: {path} is a file; pass a directory path (the output is "
                    f"a folder, committed as a whole)"
                )
            return


def staging_dir(save_path: str) -> Path:
    """A new, empty directory where the output of `save_path` is built before its commit."""
    if storage.is_remote(save_path):
        return Path(tempfile.mkdtemp(prefix="alignflow-save-"))
    dest = local_path(save_path.rstrip("/"))
    _refuse_file(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_leftovers(dest)
    staged = dest.parent / f".{dest.name}.staging-{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staged.mkdir()
    return staged


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2). False where the OS or filesystem can't."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rename2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    if rename2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, f"renameat2({a}, {b}, RENAME_EXCHANGE): {os.strerror(err)}")


def _checkpoint_folders(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if is_checkpoint_folder(p)] if folder.is_dir() else []


def _swap_into_place(staged: Path, dest: Path) -> None:
    """Put the committed `staged` directory at `dest`; the old `dest` (if any) is deleted after."""
    _refuse_file(dest)  # again: the file may have appeared while the output was built
    held = foreign_folder(str(dest))  # checked with the flags; again: it may have been filled since
    if held is not None:
        raise ConfigError(
            f"output path {dest}: a folder that is not a committed output (no MANIFEST.json) appeared there while "
            f"the run trained, holding {held}; left as it was and this run's output discarded: run again with "
            f"another output folder (with --load_checkpoint it resumes from the last checkpoint)"
        )
    # checkpoint folders inside the output (--ckpt_path <save>/ckpt) go into the new one, named by no manifest:
    # moved before the swap, so the old output deleted after it holds none of them
    for folder in _checkpoint_folders(dest):
        os.rename(folder, staged / folder.name)
    if not dest.exists():
        os.rename(staged, dest)
        return
    if not _exchange(staged, dest):
        # no atomic exchange here: two renames; between them `dest` is missing (never half-written)
        old = dest.parent / f".{dest.name}.old-{uuid.uuid4().hex[:12]}"
        os.rename(dest, old)
        os.rename(staged, dest)
        staged = old
    shutil.rmtree(staged, ignore_errors=True)  # now the previous output


class StagedOutput:
    """The output of one run of a stage, staged until `commit`; see the module docstring.

    `writes=False` (ranks other than 0) stages nothing: `dir` is None and `commit` does nothing."""

    def __init__(self, save_path: str, writes: bool = True):
        self.save_path = save_path
        self.dir: Path | None = staging_dir(save_path) if writes else None
        self.manifest: dict | None = None

    def __enter__(self) -> "StagedOutput":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.dir is not None:  # not committed: an exception left the block
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def commit(self, metadata: dict) -> dict | None:
        """Commit what was built in `dir` at save_path (MANIFEST.json with `metadata`); returns the
        manifest, None on a rank that writes nothing. The staging directory is gone afterwards."""
        if self.dir is None:
            return None
        staged, self.dir = self.dir, None
        self.manifest = commit_output(staged, self.save_path, metadata)
        log.info("output committed: %s", self.save_path)
        return self.manifest


def commit_output(staged: Path, save_path: str, metadata: dict) -> dict:
    """Commit the files built in `staged` (see staging_dir) as `save_path`; returns the manifest.
    `staged` is consumed."""
    try:
        # only while this run holds the output's lease (alignment/lease.py): a run taken over while paused
        # commits nothing
        if storage.is_remote(save_path):
            fence = lambda: lease.fenced(save_path)  # noqa: E731
            return storage.commit_dir(staged, save_path.rstrip("/"), metadata=metadata, fence=fence)
        manifest = storage.commit_dir(staged, staged, metadata=metadata)  # hashed in place, MANIFEST last
        with lease.fenced(save_path):
            _swap_into_place(staged, local_path(save_path.rstrip("/")))
        return manifest
    finally:
        shutil.rmtree(staged, ignore_errors=True)
