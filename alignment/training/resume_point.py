"""Which resumable checkpoint a run would use and whose it is: the newest committed one whose files verify
(a damaged or non-finite one skipped), its recorded run identity, and the checks a resume makes before any
weights load (the same run, as many ranks). The layout and the writes are alignment/training/checkpoint.py's."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from alignment import storage
from alignment.config.base import ConfigError
from alignment.training import finite, run_identity
from alignment.training.run_identity import RunIdentity

log = logging.getLogger(__name__)
PREFIX = "global_step"
STATE_FILE = "state.json"


@dataclass(frozen=True)
class Latest:
    uri: str  # the committed checkpoint
    name: str  # its tag, global_step<N>
    state: dict  # its state.json
    folder: Path  # this node's verified copy of its files (the checkpoint itself when local)


# checkpoint URI -> its manifest and what was found there: a process verifies a checkpoint once, however
# many times it asks (check_world_size before the model is built, then the load)
_verified: dict[str, tuple[dict, Latest]] = {}


def verify(uri: str) -> Latest:
    """The committed checkpoint at `uri`, its files checked against its MANIFEST's sizes and sha256 (a
    local checkpoint in place, a remote one as it is downloaded to this node) and its state.json parsed.
    Raises StorageError naming what is wrong. The files are hashed in parallel threads; on a local path the
    read leaves them in the page cache, from which DeepSpeed's load then reads (docs/reliability.md)."""
    manifest = storage.read_manifest(uri)
    if manifest is None:
        raise storage.StorageError(f"{uri} is not committed")
    cached = _verified.get(uri)
    if cached and cached[0] == manifest:
        return cached[1]
    folder = storage.download_dir(uri)  # verifies sizes and hashes, local and remote alike
    try:
        state = json.loads((folder / STATE_FILE).read_bytes().decode("utf-8"))
        if not isinstance(state, dict) or not isinstance(state.get("rng"), dict):
            raise ValueError("no 'rng' mapping")
    except FileNotFoundError:
        raise storage.StorageError(f"{uri} is committed without {STATE_FILE}") from None
    except ValueError as e:  # bad JSON or bad UTF-8 (UnicodeDecodeError is a ValueError)
        raise storage.StorageError(f"{uri}/{STATE_FILE} is not a valid state file ({str(e)[:120]})") from None
    if not (manifest.get("metadata") or {}).get(finite.FINITE):  # committed by a version that did not check
        finite.check_saved(folder, uri)
    found = Latest(uri, uri.rstrip("/").rsplit("/", 1)[-1], state, folder)
    _verified[uri] = (manifest, found)
    return found


def find_latest(ckpt_uri: str) -> Latest | None:
    """The newest committed checkpoint that verifies (see verify), None when none is committed. A damaged
    one, or one whose weights hold a NaN/Inf (finite.check_saved), is skipped with a warning naming it,
    and the one before it is used; when every committed checkpoint is damaged: one StorageError line (a
    CLI exits 2). A store that doesn't answer is not damage: StoreUnavailable propagates (exit 75, retried)."""
    committed = storage.list_committed(ckpt_uri, PREFIX)
    damaged: list[str] = []
    for name in reversed(committed):
        uri = f"{ckpt_uri.rstrip('/')}/{name}"
        try:
            found = verify(uri)
        except storage.StoreUnavailable:
            raise
        except storage.StorageError as e:
            what = "holds non-finite weights" if isinstance(e, finite.NonFiniteCheckpoint) else "is damaged"
            log.warning("checkpoint %s %s, not resuming from it: %s", uri, what, e)
            damaged.append(str(e))
            continue
        if damaged:
            log.warning("resuming from the older checkpoint %s instead (%d newer one(s) damaged)", uri, len(damaged))
        return found
    if damaged:
        raise storage.StorageError(
            f"every committed checkpoint under {ckpt_uri} is damaged or non-finite (newest: {damaged[0]}); "
            f"delete them or start over with a new --ckpt_path"
        )
    return None


def recorded_identity(uri: str) -> dict | None:
    """The run identity a committed checkpoint recorded (None: an older version recorded none)."""
    return ((storage.read_manifest(uri) or {}).get("metadata") or {}).get(run_identity.KEY)


def check_world_size(ckpt_uri: str, world_size: int, identity: RunIdentity | None = None) -> None:
    """Before any weights load: the checkpoint a resume would use (find_latest: verified, a damaged one
    skipped) must be this run's (`identity`: stage and config, run_identity.py) and come from as many
    ranks as this run has. Its ZeRO optimizer state is sharded per rank, and the data order depends on
    the rank count too."""
    found = find_latest(ckpt_uri)
    if found is not None and identity is not None:
        identity.check(recorded_identity(found.uri), found.uri)
    written = (storage.read_manifest(found.uri) or {}).get("metadata", {}).get("world_size") if found else None
    if written is not None and written != world_size:
        raise ConfigError(
            f"checkpoint {found.uri} was written by {written} ranks but this run has {world_size}: "
            f"resume with {written} ranks (--num_nodes x --num_gpus_per_node, or the launcher's size), "
            f"or start over with a new --ckpt_path"
        )
