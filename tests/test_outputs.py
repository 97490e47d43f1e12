"""A stage's output is built aside and committed over --save_path in one step (alignment.outputs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from alignment import outputs, storage
from alignment.config import ConfigError


def _build(staged: Path, text: str) -> None:
    (staged / "sub").mkdir()
    (staged / "model.bin").write_text(text)
    (staged / "sub" / "x.txt").write_text(text * 2)


@pytest.mark.parametrize("atomic", [True, False])
def test_commit_replaces_the_committed_output_in_one_step(tmp_path: Path, monkeypatch, atomic: bool) -> None:
    if not atomic:  # a filesystem without renameat2(RENAME_EXCHANGE): two renames
        monkeypatch.setattr(outputs, "_exchange", lambda a, b: False)
    dest = tmp_path / "model"
    first = outputs.staging_dir(str(dest))
    assert first.parent == tmp_path and first.name.startswith(".model.staging-")
    _build(first, "old")
    outputs.commit_output(first, str(dest), {"v": 1})
    assert (dest / "model.bin").read_text() == "old" and storage.read_manifest(dest)["metadata"] == {"v": 1}

    second = outputs.staging_dir(f"file://{dest}")
    _build(second, "new")
    # while the new output is being built the old one is committed and untouched
    assert storage.read_manifest(dest)["metadata"] == {"v": 1}
    assert storage.download_dir(dest, verify=True) == dest
    outputs.commit_output(second, str(dest), {"v": 2})
    assert (dest / "model.bin").read_text() == "new" and storage.read_manifest(dest)["metadata"] == {"v": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staged or old copy left


def test_a_failed_commit_leaves_the_old_output(tmp_path: Path, monkeypatch) -> None:
    dest = tmp_path / "model"
    staged = outputs.staging_dir(str(dest))
    _build(staged, "old")
    outputs.commit_output(staged, str(dest), {"v": 1})
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    staged = outputs.staging_dir(str(dest))
    _build(staged, "new")

    def broken(*_a, **_k):
        raise storage.StorageError("disk full")

    monkeypatch.setattr(storage, "commit_dir", broken)
    with pytest.raises(storage.StorageError):
        outputs.commit_output(staged, str(dest), {"v": 2})
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before
    assert not staged.exists()


def test_staging_left_by_a_dead_process_is_removed(tmp_path: Path) -> None:
    dest = tmp_path / "model"
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    leftover = tmp_path / f".model.staging-{outputs._host()}-{dead}-deadbeef"
    live = tmp_path / f".model.staging-{outputs._host()}-{os.getpid()}-cafebabe"
    leftover.mkdir()
    live.mkdir()
    staged = outputs.staging_dir(str(dest))
    assert not leftover.exists() and live.exists() and staged.exists()


def test_staged_output_commits_or_leaves_nothing_behind(tmp_path: Path) -> None:
    """The context every stage writes through: a committed output survives a failed run untouched,
    the failed run's staging directory goes, and a rank that writes nothing stages nothing."""
    dest = tmp_path / "model"
    with outputs.StagedOutput(str(dest)) as out:
        _build(out.dir, "old")
        manifest = out.commit({"v": 1})
    assert manifest == storage.read_manifest(dest) and out.dir is None
    with pytest.raises(RuntimeError, match="killed mid-run"):
        with outputs.StagedOutput(str(dest)) as out:
            staged = out.dir
            _build(staged, "new")
            raise RuntimeError("killed mid-run")
    assert not staged.exists() and (dest / "model.bin").read_text() == "old"
    assert storage.read_manifest(dest)["metadata"] == {"v": 1}
    with outputs.StagedOutput(str(dest), writes=False) as other_rank:
        assert other_rank.dir is None and other_rank.commit({"v": 3}) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_file_at_the_output_path_is_refused_never_swapped_out(tmp_path: Path) -> None:
    """--save_path naming the user's file: refused in one line, the file left where and as it was
    (an atomic exchange would otherwise swap it out to a hidden staging name)."""
    dest = tmp_path / "notes.txt"
    dest.write_text("mine")
    with pytest.raises(ConfigError, match=f"output path {dest}: {dest} is a file; pass a directory path"):
        outputs.staging_dir(str(dest))
    with pytest.raises(ConfigError, match=f"{dest} is a file"):  # a folder inside a file can't be made either
        outputs.staging_dir(str(dest / "model"))
    dest.unlink()
    staged = outputs.staging_dir(str(dest))
    _build(staged, "new")
    dest.write_text("mine")  # the file appeared while the output was built: the commit refuses it too
    with pytest.raises(ConfigError, match="is a file"):
        outputs.commit_output(staged, str(dest), {"v": 1})
    assert dest.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_folder_of_the_users_is_never_replaced(tmp_path: Path, monkeypatch) -> None:
    """A commit replaces the whole output folder, so a folder that is not a committed output of ours (a
    checkout, the working directory, someone's data) is refused with the flags (config.paths) and, if it
    appears while the run trains, at the commit itself: left as it was, every file of it."""
    from alignment.config.paths import check_not_foreign, check_output_folder

    dest = tmp_path / "repo"
    (dest / ".git").mkdir(parents=True)
    (dest / "train.py").write_text("mine")
    with pytest.raises(ConfigError, match=r"holds 2 entries \(\.git, train\.py\); the commit would replace it"):
        check_not_foreign("save_path", str(dest))
    monkeypatch.chdir(dest / ".git")
    for path in ("", "  "):
        with pytest.raises(ConfigError, match="empty; pass the folder the output is committed as"):
            check_output_folder("save_path", path)
    with pytest.raises(ConfigError, match="is the working directory or holds it"):
        check_output_folder("save_path", str(dest))
    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    check_output_folder("save_path", str(empty))
    check_not_foreign("save_path", str(empty))  # an empty folder or a committed output is fine
    staged = outputs.staging_dir(str(empty))
    _build(staged, "new")
    (empty / "data.csv").write_text("appeared while the run trained")
    with pytest.raises(ConfigError, match="holding 1 entries \\(data.csv\\); left as it was"):
        outputs.commit_output(staged, str(empty), {"v": 1})
    assert [p.name for p in empty.iterdir()] == ["data.csv"] and (dest / "train.py").read_text() == "mine"
