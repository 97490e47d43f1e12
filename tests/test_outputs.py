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
    (dest / ".git" / "HEAD").write_text("ref: refs/heads/main")
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


def test_a_full_disk_is_recognised_in_every_form_it_arrives(tmp_path: Path) -> None:
    """ENOSPC as an OSError naming the file, as torch.save's RuntimeError text, as safetensors' Rust error
    text, and wrapped by another exception: each is one DiskFull line; any other error is not."""
    import errno

    from alignment.cli.disk import disk_full

    outs = [("--save_path", str(tmp_path / "out")), ("--ckpt_path", str(tmp_path / "ckpt"))]
    named = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "ckpt" / "global_step1" / "x.pt"))
    line = str(disk_full(named, outs))
    assert line.startswith(f"--ckpt_path {tmp_path / 'ckpt'}: no space left on device (")
    staged = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".out.staging-ab-1-cd" / "model.bin"))
    assert str(disk_full(staged, outs)).startswith(f"--save_path {tmp_path / 'out'}: no space left on device (")
    elsewhere = OSError(errno.ENOSPC, "No space left on device", "/var/cache/x")
    assert str(disk_full(elsewhere, outs)).startswith("writing /var/cache/x: no space left on device (")
    torch_text = RuntimeError(
        "[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing "
        "file data/0: file write failed: write(): fd 5 failed with No space left on device"
    )
    rust_text = Exception('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space" })')
    try:
        try:
            raise torch_text
        except RuntimeError as e:
            raise ValueError("saving the checkpoint failed") from e
    except ValueError as wrapped:
        chained = wrapped
    for e in (torch_text, rust_text, chained):
        line = str(disk_full(e, outs))
        assert ": no space left on device (" in line and "free space or pass another path" in line, line
    assert disk_full(OSError(errno.EACCES, "Permission denied"), outs) is None
    assert disk_full(RuntimeError("CUDA out of memory"), outs) is None


@pytest.mark.integration
def test_a_full_disk_is_one_line_and_keeps_the_committed_model(tiny_base: Path, tmp_path: Path) -> None:
    """A full disk at the final save (safetensors' "No space left on device") and at a checkpoint (torch.save's
    `RuntimeError: write(): ...`) is one line naming the path and the space left, exit 2 (alignment/cli/disk.py),
    not a traceback; the model committed before stays committed and byte-identical. A 6 MiB tmpfs holds the
    committed tiny model (3.6 MiB) but not a second copy beside it, nor a checkpoint with optimizer states."""
    import hashlib
    import shutil
    import subprocess
    import sys

    from alignment.tiny_world.paths import tiny_dir
    from tests.conftest import python_env
    from tests.mounts import small_disk

    def cli(save: Path, *extra: str) -> subprocess.CompletedProcess:
        data = ["--dataset", str(tiny_dir() / "sft" / "train.jsonl"), "--input_key", "input", "--output_key", "output"]
        sizes = ["--max_len", "64", "--train_batch_size", "8", "--micro_train_batch_size", "8", "--max_samples", "16"]
        argv = ["--pretrain", str(tiny_base), *data, *sizes, "--save_path", str(save), *extra]
        return subprocess.run(
            [sys.executable, "-m", "alignment.cli.train_sft", *argv],
            cwd=tmp_path,  # never the checkout: the CLIs' relative defaults land here
            env=python_env(OMP_NUM_THREADS="2"),
            capture_output=True,
            text=True,
            timeout=600,
        )

    def hashes(root: Path) -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir())}

    disk = tmp_path / "disk"
    with small_disk(disk, 6) as why_not:
        if why_not:
            pytest.skip(f"no small filesystem to fill here ({why_not})")
        committed = disk / "sft"
        shutil.copytree(tiny_base, committed)
        if not (committed / storage.MANIFEST).exists():
            storage.commit_dir(committed, committed, metadata={"stage": "before"})
        before = hashes(committed)
        final = cli(committed)
        ckpt = cli(tmp_path / "out", "--ckpt_path", str(disk / "ckpt"), "--save_steps", "1")
        after = hashes(committed)
    for run, flag, path in ((final, "--save_path", committed), (ckpt, "--ckpt_path", disk / "ckpt")):
        lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-3000:]
        assert lines[-1].startswith(f"error: {flag} {path}: no space left on device ("), lines[-1]
        fix = "MiB free): free space or pass another path (what was committed before stays as it was)"
        assert lines[-1].endswith(fix), lines[-1]
    assert after == before and not (tmp_path / "out").exists()


def test_a_checkpoint_folder_inside_the_output_is_carried_over(tmp_path: Path) -> None:
    """OpenRLHF's `--ckpt.path <save>/ckpt`: checkpoints inside the output survive each commit, named by no
    manifest; a commit that died after moving them into its staging folder gives them back."""
    from alignment.config.paths import check_not_foreign

    dest = tmp_path / "model"
    (dest / "ckpt" / "global_step2").mkdir(parents=True)
    (dest / "ckpt" / "latest").write_text("global_step2")
    check_not_foreign("save_path", str(dest))  # a checkpoint folder is not the user's data
    for text in ("first", "second"):
        staged = outputs.staging_dir(str(dest))
        _build(staged, text)
        outputs.commit_output(staged, str(dest), {"v": text})
        assert (dest / "model.bin").read_text() == text and (dest / "ckpt" / "latest").read_text() == "global_step2"
        assert not any(k.startswith("ckpt/") for k in storage.read_manifest(dest)["files"])
    dead = tmp_path / f".model.staging-{outputs._host()}-{2**22 + 3}-abcd1234"  # no such pid: died mid-commit
    dead.mkdir()
    (dest / "ckpt").rename(dead / "ckpt")
    outputs.staging_dir(str(dest))
    assert (dest / "ckpt" / "latest").read_text() == "global_step2" and not dead.exists()
