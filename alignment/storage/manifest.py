"""A directory's MANIFEST.json: written last, so its presence is what "committed" means; it lists every
file with its size and sha256 and, on object stores, the version folder ("root") the files live in."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from alignment.storage.files import read_text
from alignment.storage.paths import MANIFEST, filesystem, join
from alignment.storage.retry import StorageError, one_line, retry


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(uri: str | Path) -> dict | None:
    """The directory's manifest, or None when it was never committed (or is still being written)."""
    text = read_text(join(uri, MANIFEST))
    if text is None:
        return None
    try:
        manifest = json.loads(text)
        if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
            raise ValueError("no 'files' mapping")
        if not re.fullmatch(r"(v-[\w.-]+)?", manifest.get("root", "")):
            raise ValueError(f"root {manifest['root']!r} is not a version folder name")
    except ValueError as e:
        raise StorageError(
            f"{join(uri, MANIFEST)} is not a valid manifest ({one_line(str(e))}); "
            f"delete it and re-commit the directory"
        ) from e
    return manifest


def files_root(uri: str | Path, manifest: dict) -> str:
    """Where the manifest's files are: the directory itself, or its current version folder."""
    return join(uri, manifest["root"]) if manifest.get("root") else str(uri).rstrip("/")


def file_in(dir_uri: str | Path, rel: str) -> str:
    """URI of file `rel` of the committed directory at dir_uri (inside its version folder, if any)."""
    manifest = read_manifest(dir_uri)
    return join(files_root(dir_uri, manifest) if manifest else dir_uri, rel)


def is_committed(uri: str | Path) -> bool:
    """True once the directory's MANIFEST.json exists (cheap: no parse)."""
    fs, path = filesystem(uri)
    return retry(lambda: fs.exists(f"{path}/{MANIFEST}"), "check", uri)
