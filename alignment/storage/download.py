"""Reading a committed directory back: a verified local copy of exactly the files its manifest
lists (from its version folder, if any), cached per URI and reused while the manifest is unchanged.
Callers use `storage.download_dir`."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

from alignment.storage.files import write_text_atomic
from alignment.storage.manifest import files_root, read_manifest, sha256
from alignment.storage.paths import MANIFEST, filesystem, is_remote, join
from alignment.storage.retry import StorageError, retry, run_all


def _check_files(root: Path, manifest: dict, hashes: bool) -> str | None:
    """What is wrong with the copy at root (size, then optionally sha256), or None when it matches.
    The files are checked in parallel (retry.run_all); the first problem in manifest order is named."""

    def problem(rel: str, info: dict) -> str | None:
        p = root / rel
        if not p.is_file():
            return f"{rel} is missing"
        if p.stat().st_size != info["size"]:
            return f"{rel} has {p.stat().st_size} bytes, the manifest says {info['size']}"
        if hashes and sha256(p) != info["sha256"]:
            return f"{rel} does not match its sha256 in the manifest"
        return None

    found = run_all([lambda rel=rel, info=info: problem(rel, info) for rel, info in manifest["files"].items()])
    return next((p for p in found if p), None)


def _fetch(uri: str, manifest: dict, dest: Path, verify: bool) -> None:
    fs, path = filesystem(files_root(uri, manifest))
    (dest / MANIFEST).unlink(missing_ok=True)  # the local copy is "committed" only after it checks out
    for rel in manifest["files"]:
        if rel.startswith("/") or ".." in rel.split("/"):
            raise StorageError(f"download {uri}: manifest entry {rel!r} leaves the directory; re-commit it")
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
    run_all(
        [
            lambda rel=rel: retry(lambda: fs.get_file(f"{path}/{rel}", str(dest / rel)), "download", join(uri, rel))
            for rel in manifest["files"]
        ]
    )
    problem = _check_files(dest, manifest, verify)
    if problem:
        raise StorageError(f"download {uri}: {problem}; the upload is corrupt or was overwritten, re-commit it")
    write_text_atomic(dest / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))


def _fetch_current(uri: str, manifest: dict, dest: Path, verify: bool) -> dict:
    """_fetch, again with the new manifest when a re-commit switched versions (and deleted the old
    files) under us; returns the manifest that was fetched."""
    for _ in range(3):
        try:
            _fetch(uri, manifest, dest, verify)
            return manifest
        except StorageError:
            newer = read_manifest(uri)
            if newer is None or newer == manifest:
                raise
            manifest = newer
    _fetch(uri, manifest, dest, verify)
    return manifest


def download_dir(uri: str | Path, local_dir: str | Path | None = None, verify: bool = True) -> Path:
    """A verified local copy of the committed directory at uri (exactly the files its manifest lists).

    local_dir=None: a local uri is returned as is; a remote one goes to a cache reused while its
    manifest is unchanged ($ALIGNFLOW_CACHE or ~/.cache/alignflow, one folder per URI)."""
    manifest = read_manifest(uri)
    if manifest is None:
        raise StorageError(
            f"{uri} has no {MANIFEST}: it was never committed (or is still being written); "
            f"point at a committed directory or commit it first"
        )
    fs, path = filesystem(uri)
    if not is_remote(uri) and (local_dir is None or os.path.realpath(local_dir) == os.path.realpath(path)):
        files = Path(filesystem(files_root(uri, manifest))[1])
        problem = _check_files(files, manifest, verify)
        if problem:
            raise StorageError(f"{uri}: {problem}; the directory changed after it was committed, re-commit it")
        return files
    if local_dir is not None:
        dest = Path(local_dir)
        _fetch_current(str(uri), manifest, dest, verify)
        return dest
    root = Path(os.environ.get("ALIGNFLOW_CACHE") or Path.home() / ".cache" / "alignflow")
    dest = root / hashlib.sha256(fs.unstrip_protocol(path).encode()).hexdigest()[:16]
    root.mkdir(parents=True, exist_ok=True)
    # every rank on a node may ask at once: one downloads, the others wait and then reuse its copy
    with open(root / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _cached_copy_ok(dest, manifest):
            return dest
        tmp = root / f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:  # fetch beside the entry and swap it in: a reader never sees a half-written copy
            _fetch_current(str(uri), manifest, tmp, verify)
            shutil.rmtree(dest, ignore_errors=True)
            os.replace(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _cached_copy_ok(dest: Path, manifest: dict) -> bool:
    try:
        cached = json.loads((dest / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return cached == manifest and _check_files(dest, manifest, False) is None
