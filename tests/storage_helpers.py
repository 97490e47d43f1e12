"""What the storage tests share: a per-test cache and fast retries, and small committed trees."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from alignment import storage
from alignment.storage import retry as store_retry


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALIGNFLOW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(store_retry, "BACKOFF_S", 0.01)


def make_dir(root: Path, seed: str = "x") -> Path:
    (root / "sub" / "deeper").mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"seed": seed}))
    (root / "sub" / "weights.bin").write_bytes(os.urandom(3000) + seed.encode())
    (root / "sub" / "deeper" / "empty").write_bytes(b"")
    return root


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and p.name != storage.MANIFEST
    }


def commit_steps(tmp_path: Path, parent: str, steps: list[int]) -> None:
    for s in steps:
        storage.commit_dir(make_dir(tmp_path / "src" / f"s{s}", str(s)), f"{parent}/global_step{s}", {"step": s})
