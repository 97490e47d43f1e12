"""The local folders a run writes: writable before any model loads, and a full disk as one line.

A read-only --save_path/--output_path parent or --ckpt_path (a read-only mount, a folder of another user)
failed as a PermissionError/OSError traceback from the lease file, or, for --ckpt_path, at the first checkpoint
after the model loaded and trained. A full disk failed as a safetensors or torch.save traceback ("No space left
on device") at the final save or a checkpoint. Either is the user's to fix but not a flaw of the input, and
running it again as it is fails the same way: exit 2, one line naming the path (and the space left).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from alignment.errors import UserError

# errnos of a folder this process may not write: a read-only filesystem, no permission
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


class NotWritable(UserError, OSError):
    """A local output folder this process cannot write in."""


class DiskFull(UserError, OSError):
    """A write failed with ENOSPC; the message names the path and the space left there."""


def _local(uri: str | None) -> Path | None:
    if not uri or not uri.strip() or ("://" in uri and not uri.startswith("file://")):
        return None
    return Path(os.path.abspath(os.path.expanduser(uri.removeprefix("file://"))))


def nearest_existing(path: Path) -> Path:
    """`path` or the closest folder above it that exists (where mkdir -p starts creating)."""
    for p in (path, *path.parents):
        if p.exists():
            return p
    return Path("/")


def check_writable(flag: str, uri: str | None) -> None:
    """The run can create files where `uri`'s output goes: in its parent (the staged output beside it, the
    lease file) and in the folder itself (checkpoints inside --ckpt_path; the swap deletes the old output's
    files). Probed with an unnamed temporary file (O_TMPFILE), so nothing is left behind, even when killed;
    root's writes pass chmod 0555 and fail only where the kernel says so (a read-only mount)."""
    path = _local(uri)
    if path is None:
        return
    for folder in dict.fromkeys((nearest_existing(path.parent), nearest_existing(path))):
        if not folder.is_dir():
            continue  # a file in the way: config/paths.py refuses it with its own line
        try:
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as e:
            if e.errno not in _NOT_WRITABLE:
                raise
            raise NotWritable(
                f"{flag} {uri}: cannot create files in {folder} ({os.strerror(e.errno)}); the run writes its "
                f"{'checkpoints' if flag == '--ckpt_path' else 'output'} there: pass a path on a writable "
                f"filesystem, or make {folder} writable for this user"
            ) from None


def _no_space(e: BaseException | None) -> BaseException | None:
    """The exception in `e`'s chain that is a full disk: an OSError with ENOSPC, or a wrapper that kept only
    its text (torch.save's `RuntimeError: write(): ... No space left on device`, safetensors' `IoError(Os { code:
    28, kind: StorageFull ...})`)."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            return e
        text = str(e)
        if "No space left on device" in text or "StorageFull" in text:
            return e
        e = e.__cause__ or e.__context__
    return None


def _mib_free(path: Path) -> int:
    return shutil.disk_usage(nearest_existing(path)).free >> 20


def _belongs(target: Path, output: Path) -> bool:
    """`target` is in `output` or in its staged copy beside it (`.<name>.staging-…`, alignment/outputs.py)."""
    return any(
        p == output or (p.parent == output.parent and p.name.startswith(f".{output.name}."))
        for p in (target, *target.parents)
    )


def disk_full(e: BaseException, outputs: list[tuple[str, str | None]]) -> DiskFull | None:
    """The one-line error for `e` when it is a full disk, else None. `outputs`: (flag, path) the run writes
    (--save_path/--output_path, --ckpt_path); the path named is the output holding the file the OS named (or
    that file, when it is none of theirs), else the output whose filesystem has the least space left (the one
    that filled)."""
    full = _no_space(e)
    if full is None:
        return None
    local = [(flag, p) for flag, uri in outputs if (p := _local(uri)) is not None]
    local.append(("the temporary folder", Path(tempfile.gettempdir())))  # where a store output is staged
    named = getattr(full, "filename", None)  # str or bytes (a path), an int (a descriptor) or None
    if isinstance(named, (str, bytes)) and named:
        target = Path(os.path.abspath(os.fsdecode(named)))
        # one of the run's outputs is named as the user gave it (a staged file is gone by the time this prints)
        flag, target = next(((f, p) for f, p in local if _belongs(target, p)), ("writing", target))
    else:
        flag, target = min(local, key=lambda fp: _mib_free(fp[1]))
    return DiskFull(
        f"{flag} {target}: no space left on device ({_mib_free(target)} MiB free): free space or pass another "
        f"path (what was committed before stays as it was)"
    )
