"""Filesystems a test needs and a plain folder can't give: a read-only one and a small one that fills up.

Tests run as root in CI and here, and root writes through chmod 0555; only the kernel refuses it (a read-only
mount). So a tmpfs is mounted (root, CAP_SYS_ADMIN); a user who is not root gets a chmod 0555 folder instead,
which refuses that user's writes the same way. Where neither holds (root without CAP_SYS_ADMIN, in an
unprivileged container) `why_not` says so and the test skips the part that needs it.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _mount(path: Path, options: str) -> str | None:
    """Mount a tmpfs at `path`; None when mounted, else why not."""
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True, check=False
    )
    return None if proc.returncode == 0 else f"mount -t tmpfs -o {options}: {proc.stderr.strip() or proc.returncode}"


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=True, capture_output=True)


@contextmanager
def read_only_dir(path: Path) -> Iterator[str | None]:
    """An empty folder at `path` this process cannot create files in; yields None, or why it could not be made."""
    if os.geteuid() != 0:
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o555)
        try:
            yield None
        finally:
            path.chmod(0o755)
        return
    why_not = _mount(path, "ro,size=1m")
    try:
        yield why_not
    finally:
        if why_not is None:
            _umount(path)


@contextmanager
def small_disk(path: Path, mib: int) -> Iterator[str | None]:
    """A `mib` MiB tmpfs at `path` (root only); yields None, or why it could not be mounted."""
    why_not = "not root: only root mounts a tmpfs" if os.geteuid() != 0 else _mount(path, f"size={mib}m")
    try:
        yield why_not
    finally:
        if why_not is None:
            _umount(path)
