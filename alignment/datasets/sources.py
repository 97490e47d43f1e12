"""Read rows from dataset specs: .jsonl/.json/.parquet/.csv/.arrow files, BUILDER@DIR (json, jsonl,
parquet, csv, arrow), split directories, `save_to_disk` folders, store URIs (anything fsspec opens,
e.g. s3://) or Hugging Face hub names (NAME@DATA_DIR as OpenRLHF reads it, e.g. openai/gsm8k@main);
a split may be sliced as 🤗 datasets does (`train[:10%]`, `test[100:200]`). Mixing is mixing.py,
tokenization (cached per node) tokenized.py.

JSON files are parsed here rather than by `datasets`, so a malformed line is reported with its file
and line number before any model is loaded; parquet, csv and arrow files, `save_to_disk` folders
and hub datasets are read by 🤗 datasets.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import datasets
import fsspec

from alignment import storage
from alignment.datasets.image_rows import with_images
from alignment.errors import UserError

JSON_SUFFIXES = (".jsonl", ".json")
TABLE_SUFFIXES = (".parquet", ".csv", ".arrow")  # read by 🤗 datasets
BUILDERS = {
    "json": JSON_SUFFIXES,
    "jsonl": JSON_SUFFIXES,
    "parquet": (".parquet",),
    "csv": (".csv",),
    "arrow": (".arrow",),
}
_SLICE = re.compile(r"^(?P<name>[\w.-]+)(\[(?P<start>-?\d+%?)?:(?P<end>-?\d+%?)?\])?$")


class DataError(UserError, ValueError):
    """Bad or missing training data; the message names the file/row and the fix."""


@dataclass(frozen=True)
class Source:
    spec: str  # as the user wrote it
    kind: str  # "file" | "dir" | "hub"
    location: str  # file/dir URI or hub name
    suffixes: tuple[str, ...] = JSON_SUFFIXES + TABLE_SUFFIXES  # files a directory is read from
    data_dir: str | None = None  # hub NAME@DATA_DIR


def _exists(uri: str) -> bool:
    fs, path = fsspec.core.url_to_fs(uri)
    return fs.exists(path)


def resolve(spec: str) -> Source:
    spec = spec.strip()
    if "@" in spec and not spec.startswith(("s3://", "gs://", "http")):
        builder, _, location = spec.partition("@")
        if builder in BUILDERS:
            return Source(spec, "dir", location, BUILDERS[builder])
        local = "://" in location or os.path.isabs(location) or os.path.exists(location)  # FORMAT@DIR meant
        if local or not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", builder):
            raise DataError(
                f"dataset {spec!r}: in NAME@DIR, NAME is a file format ({', '.join(BUILDERS)}) "
                f"or a hub dataset name"
            )
        return Source(spec, "hub", builder, data_dir=location)
    if spec.endswith(JSON_SUFFIXES + TABLE_SUFFIXES):
        return Source(spec, "file", spec)
    if "://" in spec or os.path.isabs(spec) or spec.startswith(".") or _exists(spec):
        return Source(spec, "dir", spec)
    return Source(spec, "hub", spec)


def parse_json_lines(text: str, where: str) -> list[dict]:
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(
                f"{where}:{lineno}: malformed JSON ({e.msg} at column {e.colno}); fix or remove that line"
            ) from None
        if not isinstance(row, dict):
            raise DataError(f"{where}:{lineno}: expected a JSON object per line, got {type(row).__name__}")
        rows.append(row)
    return rows


def check_store(flag: str, uri: str, error: type[Exception] | None = None) -> None:
    """One request to a remote URI's store, so that a missing bucket is named as such (not as a
    missing file) with its flag. Other store errors (unreachable, access denied) propagate as
    storage raised them: they name the URI, and an unreachable store stays a transient fault."""
    if not storage.is_remote(uri):
        return
    try:
        storage.check_reachable(uri)
    except storage.StorageError as e:
        if isinstance(e.__cause__, FileNotFoundError):  # `ls` of the bucket itself: only the bucket can be missing
            bucket = uri.split("://", 1)[1].split("/", 1)[0]
            raise (error or DataError)(
                f"{flag} {uri}: the bucket {bucket!r} does not exist; create it or fix the URI"
            ) from None
        raise


def _decode(data: bytes, uri: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DataError(
            f"{uri}:{line}: not UTF-8 (byte 0x{data[e.start]:02x}); save the file as UTF-8, "
            f"e.g. iconv -f latin1 -t utf-8"
        ) from None


def read_json_file(uri: str, flag: str = "--dataset") -> list[dict]:
    try:
        with fsspec.open(uri, "rb") as f:
            text = _decode(f.read(), uri)
    except FileNotFoundError:
        check_store(flag, uri)
        raise DataError(f"dataset file {uri} does not exist: check the {flag} path") from None
    stripped = text.lstrip()
    if uri.endswith(".json") and stripped.startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"{uri}:{e.lineno}: malformed JSON ({e.msg}); fix the file") from None
        if not all(isinstance(r, dict) for r in rows):
            raise DataError(f"{uri}: expected a JSON list of objects")
        return rows
    return parse_json_lines(text, uri)


def _read_table(uri: str, flag: str) -> list[dict]:
    """A parquet, csv or arrow file, through 🤗 datasets."""

    builder = uri.rsplit(".", 1)[-1].lower()
    if not _exists(uri):
        check_store(flag, uri)
        raise DataError(f"dataset file {uri} does not exist: check the {flag} path")
    try:
        ds = datasets.load_dataset(builder, data_files=uri, split="train")
    except Exception as e:  # noqa: BLE001 - one actionable line, cause kept
        raise DataError(
            f"{uri}: not a readable {builder} file ({type(e).__name__}: "
            f"{' '.join(str(e).split())[:200]}); fix or re-export the file"
        ) from e
    return [dict(r) for r in ds]


def read_file(uri: str, flag: str = "--dataset") -> list[dict]:
    return read_json_file(uri, flag) if uri.endswith(JSON_SUFFIXES) else _read_table(uri, flag)


def _split_files(
    location: str, split: str, flag: str = "--dataset", suffixes: tuple[str, ...] = JSON_SUFFIXES
) -> list[str]:
    """Files of `split` in a directory: `<split>.jsonl`, `<split>-*.parquet`, `<split>/...` (HF layout)."""
    fs, root = fsspec.core.url_to_fs(location)
    if not fs.isdir(root):
        check_store(flag, location)
        raise DataError(f"dataset directory {location} does not exist: check the {flag} path")
    protocol = location.split("://")[0] + "://" if "://" in location else ""
    found = []
    for path in sorted(fs.find(root)):
        rel = os.path.relpath(path, root)
        name = os.path.basename(rel)
        if not name.endswith(suffixes):
            continue
        stem = name.split(".")[0]
        first_dir = rel.split(os.sep)[0] if os.sep in rel else ""
        if stem == split or stem.startswith(split + "-") or stem.startswith(split + "_") or first_dir == split:
            found.append(protocol + path if protocol and not path.startswith(protocol) else path)
    return found


def _saved_to_disk(location: str) -> bool:
    """A `Dataset.save_to_disk` / `DatasetDict.save_to_disk` folder."""
    return "://" not in location and (
        os.path.exists(os.path.join(location, "dataset_dict.json"))
        or os.path.exists(os.path.join(location, "state.json"))
    )


def _read_saved(location: str, split: str) -> list[dict]:
    ds = datasets.load_from_disk(location)
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise DataError(
                f"dataset {location} (save_to_disk) has no '{split}' split; it has "
                f"{', '.join(ds)}: pass one of them as the split"
            )
        ds = ds[split]
    return [dict(r) for r in ds]


def _read_hub(name: str, split: str, data_dir: str | None = None) -> list[dict]:
    try:
        ds = datasets.load_dataset(name, data_dir=data_dir, split=split)
    except Exception as e:  # noqa: BLE001 - turned into one actionable line, cause kept
        offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1"
        why = (
            "the hub is offline (HF_HUB_OFFLINE=1)"
            if offline
            else f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        )
        raise DataError(
            f"dataset {name!r} is not a local file or directory and could not be loaded from the "
            f"Hugging Face hub ({why}); pass a local .jsonl path or json@DIR instead"
        ) from e
    return [dict(r) for r in ds]


def split_slice(split: str) -> tuple[str, slice]:
    """`train[:10%]` -> ("train", rows 0 .. 10 % of them), as 🤗 datasets reads split strings
    (percentages are rounded to the nearest row)."""
    m = _SLICE.match(split.strip())
    if not m:
        raise DataError(f"split {split!r}: expected NAME or NAME[START:END] (rows or %, e.g. train[:10%])")
    return m["name"], slice(m["start"], m["end"]) if m.group(2) else slice(None)


def _apply_slice(rows: list[dict], part: slice) -> list[dict]:
    def at(bound: str | None) -> int | None:
        if bound is None:
            return None
        return round(float(bound[:-1]) / 100 * len(rows)) if bound.endswith("%") else int(bound)

    return rows[at(part.start) : at(part.stop)]


def read_rows(spec: str, split: str = "train", flag: str = "--dataset", image_key: str | None = None) -> list[dict]:
    """`flag`: the option `spec` came from, named in errors (--dataset, --eval_dataset, --prompt_data).
    `split` may carry a slice (`train[:10%]`). `image_key`: the column of a vision-language dataset's images,
    read as alignment.datasets.image_rows says (relative paths found beside the data file too)."""
    src = resolve(spec)
    name, part = split_slice(split)
    if src.kind == "file":
        rows = with_images(read_file(src.location, flag), image_key, _folder(src.location))
    elif src.kind == "dir" and _saved_to_disk(src.location):
        rows = with_images(_read_saved(src.location, name), image_key, src.location)
    elif src.kind == "dir":
        files = _split_files(src.location, name, flag, src.suffixes)
        if not files:
            raise DataError(
                f"dataset {spec!r} has no '{name}' split: expected {name}.jsonl "
                f"(or {name}-*.jsonl, .parquet, .csv, .arrow) in {src.location}"
            )
        rows = [r for f in files for r in with_images(read_file(f, flag), image_key, _folder(f))]
    else:
        return _nonempty(with_images(_read_hub(src.location, split, src.data_dir), image_key, None), spec, split)
    return _nonempty(_apply_slice(rows, part), spec, split)


def _folder(uri: str) -> str:
    return uri.rsplit("/", 1)[0] if "://" in uri else os.path.dirname(os.path.abspath(uri))


def _nonempty(rows: list[dict], spec: str, split: str) -> list[dict]:
    if not rows:
        raise DataError(f"dataset {spec!r} (split {split}) is empty: it has 0 rows")
    return rows
