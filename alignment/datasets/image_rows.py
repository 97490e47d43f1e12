"""A row's images as they are read (--image_key), in the forms OpenRLHF's vision-language data takes: a path,
a store URI (`file://`, `s3://`), a base64 data URI, raw bytes (a parquet column, 🤗's `Image` feature), one or
a list.

Rows travel as JSON text (alignment.datasets.mixing), so bytes and decoded images become data URIs when a row is
read, and a relative path becomes absolute: first as OpenRLHF reads it (from the working directory), else from the
folder of the data file that holds the row, so a dataset folder with its images beside it works from anywhere.
"""

from __future__ import annotations

import base64
import io
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from PIL import Image


def data_uri(data: bytes) -> str:
    return "data:image;base64," + base64.b64encode(data).decode()


def as_json_value(value: Any) -> Any:
    """An image value JSON can carry: bytes and PIL images as data URIs, 🤗 `Image` dicts by their bytes or
    path. Anything else is left for `image_refs` to name."""
    if isinstance(value, (bytes, bytearray)):
        return data_uri(bytes(value))
    if isinstance(value, dict) and ("bytes" in value or "path" in value):
        return data_uri(value["bytes"]) if value.get("bytes") else value.get("path")
    if hasattr(value, "save") and hasattr(value, "mode"):  # a decoded PIL image (a saved 🤗 dataset)
        return data_uri(encode_png(value))
    if isinstance(value, list):
        return [as_json_value(v) for v in value]
    return value


def anchored(value: Any, folder: str) -> Any:
    """`value` with each relative path that is not found from the working directory made relative to
    `folder` (the data file's), when the image is there."""
    if isinstance(value, list):
        return [anchored(v, folder) for v in value]
    if not isinstance(value, str) or value.startswith("data:") or "://" in value or os.path.isabs(value):
        return value
    if os.path.exists(value):
        return os.path.abspath(value)
    if "://" in folder:
        return f"{folder.rstrip('/')}/{value}"
    beside = os.path.join(folder, value)
    return os.path.abspath(beside) if os.path.exists(beside) else value


def encode_png(image: Image.Image) -> bytes:
    """An image as PNG bytes: how an image crosses Ray (a rollout's images) and JSON."""
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def with_images(rows: list[dict], key: str | None, folder: str | None) -> list[dict]:
    """`rows` (read from a file in `folder`; None: the hub) with their `key` values JSON can carry and anchored."""
    if not key:
        return rows
    out = []
    for row in rows:
        if key in row:
            value = as_json_value(row[key])
            row = {**row, key: anchored(value, folder) if folder else value}
        out.append(row)
    return out
