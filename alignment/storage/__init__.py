"""Checkpoint directories in object storage (local paths, file://, s3://) via fsspec.

A directory counts as *committed* only once its MANIFEST.json exists; the manifest is written last,
so a crash mid-upload leaves a directory every reader ignores. Re-committing over a committed
object-store directory never uncommits it: the new files go to a fresh version folder
(`<uri>/v-<time>-<id>/`, named by the manifest's "root"), the one PUT of the new MANIFEST.json
switches readers over, and only then are the old files deleted (S3 has no directory rename).

Callers import this package (`from alignment import storage`); its modules import one way, each only
the ones listed before it: paths → retry → files → manifest → latest, commit, download.
"""

from __future__ import annotations

from alignment.storage.commit import commit_dir, commit_parts, new_version, upload_files
from alignment.storage.download import download_dir
from alignment.storage.files import (
    check_reachable,
    exists,
    fetch_file,
    list_files,
    read_bytes,
    read_text,
    remove,
    retry_call,
    write_text_atomic,
)
from alignment.storage.latest import apply_retention, get_latest, list_committed, set_latest
from alignment.storage.manifest import file_in, is_committed, read_manifest
from alignment.storage.paths import BEST, LATEST, MANIFEST, filesystem, is_remote, read_timeout_s
from alignment.storage.retry import StorageError, StoreUnavailable

__all__ = [
    "BEST",
    "LATEST",
    "MANIFEST",
    "StorageError",
    "StoreUnavailable",
    "apply_retention",
    "check_reachable",
    "commit_dir",
    "commit_parts",
    "download_dir",
    "exists",
    "fetch_file",
    "file_in",
    "filesystem",
    "get_latest",
    "is_committed",
    "is_remote",
    "list_committed",
    "list_files",
    "new_version",
    "read_manifest",
    "read_bytes",
    "read_text",
    "read_timeout_s",
    "remove",
    "retry_call",
    "set_latest",
    "upload_files",
    "write_text_atomic",
]
