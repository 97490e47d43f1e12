"""Checkpoint folders under one parent: which are committed, the newest (what a resume reads), the
`latest` pointer (for people and DeepSpeed-style tools) and retention."""

from __future__ import annotations

from pathlib import Path

from alignment.storage.files import children, natural_key, read_text, remove, write_text_atomic
from alignment.storage.manifest import is_committed, read_manifest
from alignment.storage.paths import BEST, LATEST, MANIFEST, join
from alignment.storage.retry import StorageError


def list_committed(parent_uri: str | Path, prefix: str = "") -> list[str]:
    """Child directory names under parent that have a manifest, oldest first (global_step9 < global_step10)."""
    return [n for n in children(parent_uri, prefix) if is_committed(join(parent_uri, n))]


def set_latest(parent_uri: str | Path, name: str, pointer: str = LATEST) -> None:
    """Point parent/latest (or parent/`pointer`: BEST) at child `name`; refused unless that child is committed,
    so the pointer can never name a half-written checkpoint."""
    if not name or "/" in name or name in (".", ".."):
        raise StorageError(
            f"set_latest {parent_uri}: {name!r} is not a child directory name; pass e.g. 'global_step10'"
        )
    if not is_committed(join(parent_uri, name)):
        raise StorageError(
            f"set_latest {parent_uri}: {join(parent_uri, name)} has no {MANIFEST}; "
            f"commit it with commit_dir() before pointing '{pointer}' at it"
        )
    write_text_atomic(join(parent_uri, pointer), name)


def _pointer(parent_uri: str | Path, pointer: str = LATEST) -> str | None:
    text = read_text(join(parent_uri, pointer))
    name = text.strip() if text else ""
    return name if name and "/" not in name and name not in (".", "..") else None


def get_latest(parent_uri: str | Path, prefix: str = "") -> str | None:
    """URI of the checkpoint to resume from: the newest committed child (with `prefix`), None if none.
    Not the `latest` pointer: a run killed between a commit and the pointer's update leaves the
    pointer one checkpoint behind, and every reader (trainers, the stage task's log line, tests) must
    agree on one answer. The pointer is still written, for people and DeepSpeed-style tools."""
    committed = list_committed(parent_uri, prefix)
    return join(parent_uri, committed[-1]) if committed else None


def apply_retention(
    parent_uri: str | Path, keep: int, prefix: str = "global_step", max_bytes: float | None = None
) -> list[str]:
    """Delete all but the newest `keep` committed children with `prefix` (keep <= 0: delete nothing), then, with
    `max_bytes`, the oldest of the rest until the kept ones' files (sizes from their manifests) fit in it, plus
    uncommitted leftovers older than the newest committed one. Never the newest committed one nor the `latest`
    and `best` targets. Uncommitted children newer than that may be writes in progress and stay. Returns deleted
    names."""
    if keep <= 0:
        return []
    names = children(parent_uri, prefix)
    committed = [n for n in names if is_committed(join(parent_uri, n))]
    if not committed:
        return []
    newest, protected = natural_key(committed[-1]), {_pointer(parent_uri), _pointer(parent_uri, BEST)}
    kept = [n for n in committed[-keep:]]
    if max_bytes is not None:  # --max_ckpt_mem: the oldest go first, the newest always stays
        size = {n: _bytes(join(parent_uri, n)) for n in kept}
        while sum(size[n] for n in kept) > max_bytes:
            victim = next((n for n in kept[:-1] if n not in protected), None)
            if victim is None:
                break
            kept.remove(victim)
    doomed = [
        n
        for n in names
        if n not in protected
        and ((n in committed and n not in kept) or (n not in committed and natural_key(n) < newest))
    ]
    for n in doomed:
        remove(join(parent_uri, n))
    return doomed


def _bytes(uri: str) -> int:
    """What a committed folder's files take, as its manifest records them."""
    return sum(int(info.get("size", 0)) for info in (read_manifest(uri) or {}).get("files", {}).values())
