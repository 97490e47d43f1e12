"""Bad input a user really types: every case is ONE `error:` line on stderr naming the flag or file,
exit status 2, no traceback or argparse usage block, no model loaded, and the committed model at
--save_path left byte-identical (issue 21, point 4).

Argparse-level cases and two representative deeper ones run as real `python -m` subprocesses. The
rest run in one driver subprocess (`_drive`) that calls each CLI's `run_main` with argv: 40 separate
torch/DeepSpeed start-ups would take minutes on 2 cores. The driver fails a case loudly if it reaches
`PreTrainedModel.from_pretrained` or `ray.init` (the model loads / Ray starts); the real subprocesses
are checked for transformers' "Loading weights" bar instead.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bad_input_cases_preference import PREFERENCE_CASES
from tests.bad_input_cases_rl import RL_CASES
from tests.bad_input_cases_sft import CASE_ENV, SFT_CASES
from tests.bad_input_cases_tools import TOOL_CASES
from tests.bad_input_files import write_bad_files, write_vision_files
from tests.conftest import python_env
from tests.fixtures_s3 import PLANTED_SECRET
from tests.mounts import read_only_dir

pytestmark = pytest.mark.integration

# the corpus: one table per stage family (tests/bad_input_cases_*.py)
CASES = [*SFT_CASES, *PREFERENCE_CASES, *RL_CASES, *TOOL_CASES]


def _drive(spec: str) -> None:
    """In a fresh interpreter: run each case's CLI entry in-process and write {name: [code, stderr, s]}."""
    import importlib
    import logging
    import os
    import traceback

    import ray
    from transformers import PreTrainedModel

    from alignment.cli.common import run_main

    def forbidden(what):
        def hit(*a, **k):
            print(f"FORBIDDEN: {what} before the error", file=sys.stderr)
            raise RuntimeError(what)

        return hit

    PreTrainedModel.from_pretrained = classmethod(forbidden("a model loaded"))  # every Auto* load ends here
    ray.init = forbidden("Ray started")
    job = json.loads(Path(spec).read_text())
    results = {}
    for name, module, argv in job["cases"]:
        main = importlib.import_module(f"alignment.cli.{module}").main
        saved_env, saved_err, buf = dict(os.environ), sys.stderr, io.StringIO()
        sys.stderr = buf
        for h in logging.root.handlers[:]:  # run_main's basicConfig then logs into this case's buffer
            logging.root.removeHandler(h)
        start, code = time.monotonic(), 0
        try:
            run_main(main, argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:  # what `python -m` would print
            traceback.print_exc()
            code = 1
        finally:
            sys.stderr = saved_err
            os.environ.clear()
            os.environ.update(saved_env)
        results[name] = [code, buf.getvalue(), time.monotonic() - start]
    Path(job["out"]).write_text(json.dumps(results))


def _tree_hash(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def world(tiny_base, module_tmp, moto_endpoint):
    """Bad files, a committed model at --save_path, and the env every run gets (S3 pointed at moto)."""
    from alignment import storage

    work = module_tmp
    bad = work / "bad"
    bad.mkdir()
    write_bad_files(bad, tiny_base)
    vlm = write_vision_files(bad / "vision", work / "vlm")
    out = work / "committed"
    shutil.copytree(tiny_base, out)
    storage.commit_dir(out, out, metadata={"stage": "test_bad_input"})
    env = python_env(
        AWS_ENDPOINT_URL_S3=moto_endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY=PLANTED_SECRET,
        AWS_DEFAULT_REGION="us-east-1",
        OMP_NUM_THREADS="1",
    )
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "RAY_ADDRESS"):
        env.pop(var, None)
    subst = {"@MODEL@": str(tiny_base), "@OUT@": str(out), "@BAD@": str(bad), "@WORK@": str(work), "@VLM@": str(vlm)}
    with read_only_dir(work / "read_only") as ro_why_not:  # @RO@: an empty read-only mount (tests/mounts.py)
        subst["@RO@"] = str(work / "read_only")
        yield work, out, env, lambda argv: [_subst(a, subst) for a in argv], ro_why_not


def _needs_read_only(argv: list[str]) -> bool:
    return any("@RO@" in a for a in argv)


def _subst(arg: str, subst: dict[str, str]) -> str:
    for key, value in subst.items():
        arg = arg.replace(key, value)
    return arg


@pytest.fixture(scope="module")
def results(world):
    """{case name: (exit status, stderr, seconds)} for every case; the committed model hashed around them."""
    work, out, env, fill, ro_why_not = world
    runnable = [c for c in CASES if ro_why_not is None or not _needs_read_only(c[2])]
    before = _tree_hash(out)
    cwd = work / "cwd"  # the CLIs' relative defaults (./ckpt) land here: nothing may appear
    cwd.mkdir()
    res = {}
    for name, module, argv, _, real in runnable:
        if real:
            start = time.monotonic()
            case_env = {**env, **CASE_ENV.get(name, {})}
            proc = subprocess.run(
                [sys.executable, "-m", f"alignment.cli.{module}", *fill(argv)],
                cwd=cwd,
                env={k: v for k, v in case_env.items() if v is not None},
                capture_output=True,
                text=True,
                timeout=300,
            )
            res[name] = (proc.returncode, proc.stderr, time.monotonic() - start)
    spec = work / "driver.json"
    spec.write_text(
        json.dumps(
            {
                "out": str(work / "driver_out.json"),
                "cases": [(n, m, fill(a)) for n, m, a, _, real in runnable if not real],
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-c", f"from tests.test_bad_input import _drive; _drive({str(spec)!r})"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res.update({k: tuple(v) for k, v in json.loads((work / "driver_out.json").read_text()).items()})
    print("\n".join(f"{n}: {res[n][2]:.1f}s  {res[n][1].strip()}" for n, *_ in runnable))
    assert _tree_hash(out) == before, "a bad-input run changed the committed model at --save_path"
    assert not any(cwd.iterdir()), sorted(cwd.iterdir())
    return res


def test_corpus_is_big_enough():
    assert len(CASES) >= 120 and len({c[0] for c in CASES}) == len(CASES)
    assert all(c[4] for c in CASES if c[0] in CASE_ENV) and set(CASE_ENV) <= {c[0] for c in CASES}
    assert sum(c[4] for c in CASES) >= 6  # the usage-block cases and two deeper ones run as real processes


@pytest.mark.parametrize("name, module, argv, needle, real", CASES, ids=[c[0] for c in CASES])
def test_one_clear_line(results, world, name, module, argv, needle, real):
    if world[4] is not None and _needs_read_only(argv):
        pytest.skip(f"no read-only folder can be made here ({world[4]}): root writes through chmod 0555")
    code, stderr, _ = results[name]
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert code == 2, stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    assert world[3]([needle])[0] in lines[0], lines[0]
    assert "Traceback" not in stderr and "usage:" not in stderr and "FORBIDDEN" not in stderr
    assert "Loading weights" not in stderr and PLANTED_SECRET not in stderr


def test_reliability_doc_lists_every_case():
    """docs/reliability.md's corpus table names every case (regenerate it when a case is added)."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "reliability.md").read_text()
    assert f"holds {len(CASES)} bad inputs" in doc and f"corpus: {len(CASES)} cases" in doc
    assert [n for n, *_ in CASES if f"| `{n}` |" not in doc] == []
