"""What the local files a stage reads contain, as part of the stage's identity: fix a bug in
`my.jsonl`, rerun, and the stage runs again instead of saying "already committed". The model card
of every committed model records the same fingerprints of its data (alignment/models/card.py).

Files up to FULL_HASH_BYTES are hashed whole; bigger ones by size, mtime and their first and
last MiB (a full read of a multi-GB weight file on every flow start would cost more than it
saves). A committed directory (one with our MANIFEST.json) is identified by its manifest, which
already holds every file's sha256. Remote URIs (s3://) and hub names are left to their URI.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

FULL_HASH_BYTES = 64 << 20
EDGE_BYTES = 1 << 20
MANIFEST = "MANIFEST.json"


def _file(path: Path) -> str:
    st = path.stat()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if st.st_size <= FULL_HASH_BYTES:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
            return f"{st.st_size}:{h.hexdigest()[:16]}"
        h.update(f.read(EDGE_BYTES))
        f.seek(st.st_size - EDGE_BYTES)
        h.update(f.read(EDGE_BYTES))
    return f"{st.st_size}:{st.st_mtime_ns}:{h.hexdigest()[:16]}"


def _tree(root: Path) -> str:
    if (root / MANIFEST).is_file():
        return "manifest:" + _file(root / MANIFEST)
    h = hashlib.sha256()
    for p in sorted(q for q in root.rglob("*") if q.is_file() and not any(s.startswith(".") for s in q.parts)):
        h.update(f"{p.relative_to(root).as_posix()}={_file(p)};".encode())
    return "tree:" + h.hexdigest()[:16]


def local_paths(spec: str) -> list[Path]:
    """The existing local files/directories named by a path flag's value: `a.jsonl,b.jsonl`,
    `json@DIR`, `file://...`; URIs of other schemes and hub names give none. A relative path
    (a CLI run's; a flow makes its paths absolute) is taken from the working directory."""
    out = []
    for item in spec.split(","):
        path = item.rpartition("@")[2] if "@" in item and "://" not in item.split("@")[0] else item
        path = path.removeprefix("file://")
        if path and "://" not in path and os.path.exists(path):
            out.append(Path(path if os.path.isabs(path) else os.path.abspath(path)))
    return out


def fingerprint(spec: str) -> dict[str, str]:
    """{local path: content fingerprint} for every local file or directory `spec` names."""
    return {str(p): (_tree(p) if p.is_dir() else _file(p)) for p in local_paths(spec)}
