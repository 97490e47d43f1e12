"""Committing a directory to the store: every file uploaded (hashed in place when the target is the
directory itself), then MANIFEST.json written last. Over a committed object-store directory the new
files go to a version folder and one PUT of the manifest switches readers to them; only then are the
old files deleted (alignment/storage/__init__.py). `storage.commit_dir` is the entry point."""

from __future__ import annotations

import json
import os
import uuid
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from alignment.storage.files import children, remove, write_text_atomic
from alignment.storage.manifest import read_manifest, sha256
from alignment.storage.paths import MANIFEST, filesystem, is_remote, join
from alignment.storage.retry import StorageError, StoreUnavailable, retry, run_all


def commit_dir(
    local_dir: str | Path,
    uri: str | Path,
    metadata: dict | None = None,
    fence: Callable[[], AbstractContextManager] = nullcontext,
) -> dict:
    """Upload every file under local_dir to uri, then write uri/MANIFEST.json last; returns the manifest.

    When uri is local_dir itself (a local save path) nothing is copied: the files are hashed in place.
    Over a committed object-store directory the upload goes to a new version folder and the old
    version stays committed until the new manifest replaces the old one (module docstring).
    `fence()` surrounds each change a reader can see (an output lease's check, alignment/lease.py): the
    old manifest's removal on a local path, the new manifest's write; not the long hashing and upload."""
    src = Path(local_dir)
    if not src.is_dir():
        raise StorageError(f"commit {uri}: source {src} is not a directory; save the files there first")
    fs, path = filesystem(uri)
    in_place = not is_remote(uri) and os.path.realpath(path) == os.path.realpath(src)
    old = _old_manifest(uri) if is_remote(uri) else None
    root = new_version() if old else ""
    if not is_remote(uri):  # local commits go to fresh directories (outputs.py swaps them into place)
        with fence():
            retry(
                lambda: fs.rm_file(f"{path}/{MANIFEST}") if fs.exists(f"{path}/{MANIFEST}") else None, "uncommit", uri
            )
    entries = upload_files(src, uri, root, in_place=in_place)
    with fence():
        return _write_manifest(uri, entries, metadata, root, old)


def new_version() -> str:
    """A version folder's name: readers follow the manifest's "root" into it."""
    return f"v-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


def upload_files(
    local_dir: str | Path, uri: str | Path, root: str, prefix: str = "", in_place: bool = False
) -> dict[str, dict[str, Any]]:
    """Hash and upload every file under local_dir to uri/root/prefix/...; returns their manifest
    entries, keyed prefix/<path under local_dir>. in_place: hash only (uri is local_dir itself).
    Several processes may each upload their part of one directory (commit_parts writes its manifest)."""
    src = Path(local_dir)
    fs, path = filesystem(uri)
    files = sorted(
        p
        for p in src.rglob("*")
        if p.is_file() and not (p.parent == src and (p.name == MANIFEST or p.name.startswith(f".{MANIFEST}.tmp-")))
    )
    rels = [f"{prefix}/{p.relative_to(src).as_posix()}".lstrip("/") for p in files]

    def upload(p: Path, key: str) -> None:
        retry(lambda: fs.put_file(str(p), f"{path}/{key}"), "upload", join(uri, key))

    # every file hashed and uploaded as separate jobs on a thread pool: a file's hash overlaps its own
    # upload and the other files' (docs/benchmarks.md, "Store transfers")
    hashes = [lambda p=p: {"size": p.stat().st_size, "sha256": sha256(p)} for p in files]
    uploads = (
        []
        if in_place
        else [lambda p=p, rel=rel: upload(p, f"{root}/{rel}" if root else rel) for p, rel in zip(files, rels)]
    )
    return dict(zip(rels, run_all(hashes + uploads)[: len(files)]))


def commit_parts(
    uri: str | Path,
    root: str,
    entries: dict[str, dict[str, Any]],
    metadata: dict | None,
    fence: Callable[[], AbstractContextManager] = nullcontext,
) -> dict:
    """Commit an object-store directory whose files several processes uploaded into its version folder
    `root` (upload_files); `entries` are all of theirs. Returns the manifest. `fence`: as commit_dir's."""
    if not root:
        raise StorageError(f"commit {uri}: parts uploaded by several processes need a version folder (new_version())")
    with fence():
        return _write_manifest(uri, entries, metadata, root, _old_manifest(uri))


def _write_manifest(uri: str | Path, entries: dict, metadata: dict | None, root: str, old: dict | None) -> dict:
    filesystem(uri)[0].invalidate_cache()
    manifest = {
        "format": 1,
        "files": dict(sorted(entries.items())),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "metadata": metadata,
        **({"root": root} if root else {}),
    }
    write_text_atomic(join(uri, MANIFEST), json.dumps(manifest, indent=1, sort_keys=True))
    if old or root:
        _drop_old_version(uri, old, root)
    return manifest


def _old_manifest(uri: str | Path) -> dict | None:
    try:
        return read_manifest(uri)
    except StoreUnavailable:
        raise
    except StorageError:  # an unreadable manifest commits nothing: overwrite it like a first commit
        return None


def _drop_old_version(uri: str | Path, old: dict | None, root: str) -> None:
    """After the switch: delete the previous version's files (if any) and version folders of crashed commits."""
    fs, path = filesystem(uri)
    old_root = (old or {}).get("root", "")
    for rel in (old or {}).get("files", ()):
        key = f"{old_root}/{rel}" if old_root else rel
        retry(lambda: fs.rm_file(f"{path}/{key}") if fs.exists(f"{path}/{key}") else None, "delete", join(uri, key))
    for name in children(uri, "v-"):
        if name != root:
            remove(join(uri, name))
    fs.invalidate_cache()
