"""What an interrupted pipeline kept, in one line: the stages it committed, the checkpoint the interrupted
stage resumes from, and the command that continues (`make demo`, a flow run started from a script).

Read from the store, where a rerun will look: a stage directory (`<store>/<run>/<stage>-<identity>/`)
whose model is committed is skipped by the rerun; one with committed checkpoints resumes from the
newest. When a stage's config changed between runs, the newest directory of that stage is the one named.
"""

from __future__ import annotations

import signal
import sys

from alignment import storage


def sigterm_as_ctrl_c() -> dict:
    """From now on `kill` (SIGTERM) ends this process as Ctrl-C does: a KeyboardInterrupt, so the flow's
    Ray head and Prefect's temporary API server are stopped on the way out (left to SIGTERM's default, the
    API server, a child process, outlives its parent). Returns {"signal": the one that arrived}, SIGINT
    until a SIGTERM does; the exit status is 128 + it.

    A second SIGTERM while that stop runs (`timeout` and a `pkill` together) is answered with one line, not
    raised: raised inside the cleanup (stopping the Ray job, the head, the API server) it would cut the
    cleanup short; a benchmark signalled twice within a second once sat idle afterwards with nothing printed.
    SIGKILL still stops it at once."""
    got = {"signal": signal.SIGINT}

    def on_sigterm(signum, frame):
        if got["signal"] == signum:
            print("already stopping: the Ray job, head and Prefect API are being stopped", file=sys.stderr, flush=True)
            return
        got["signal"] = signum
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    return got


def _stage_dirs(store: str, run_name: str) -> dict[str, str]:
    """{stage: its newest directory's URI} under <store>/<run_name>."""
    fs, path = storage.filesystem(f"{store.rstrip('/')}/{run_name}")
    try:
        entries = storage.retry_call(lambda: fs.ls(path, detail=True), "list", path)
    except storage.StorageError:
        return {}
    newest: dict[str, tuple[float, str]] = {}
    for e in entries:
        name = e["name"].rstrip("/").rsplit("/", 1)[-1]
        if e.get("type") != "directory" or "-" not in name:
            continue
        stage, when = name.rsplit("-", 1)[0], float(e.get("mtime") or 0)
        if stage not in newest or when >= newest[stage][0]:
            newest[stage] = (when, f"{store.rstrip('/')}/{run_name}/{name}")
    return {stage: uri for stage, (_, uri) in sorted(newest.items(), key=lambda kv: kv[1][0])}


def summary_line(store: str, run_name: str, command: str) -> str:
    """The one line an interrupted pipeline prints (see the module docstring)."""
    committed, resumes, over = [], [], []
    for stage, uri in _stage_dirs(store, run_name).items():
        if storage.is_committed(f"{uri}/model"):
            committed.append(stage)
        elif latest := storage.get_latest(f"{uri}/checkpoints", "global_step"):
            resumes.append(f"{stage} resumes from its checkpoint {latest}")
        else:
            over.append(stage)
    parts = [f"committed: {', '.join(committed)}" if committed else "nothing committed yet"]
    parts += resumes + ([f"{', '.join(over)} start(s) over (no checkpoint yet)"] if over else [])
    return f"interrupted: {'; '.join(parts)}; to continue, run {command} again (committed stages are skipped)"
