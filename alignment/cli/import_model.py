"""python -m alignment.cli.import_model SRC --save_path URI: commit a model made elsewhere (a .gguf
file, an HF folder, an s3:// folder without MANIFEST.json, a hub name) as a plain Hugging Face folder
in the store, ready for `--pretrain URI` and plain `from_pretrained` (alignment/models/importing.py)."""

from __future__ import annotations

import sys

from alignment.cli.common import run_main
from alignment.config import parse_args
from alignment.config.tools import ImportModelConfig


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-"):  # SRC first, as `cp SRC DEST` reads
        argv = ["--source", *argv]
    cfg = parse_args(ImportModelConfig, argv, prog="alignment.cli.import_model")
    from alignment.models.importing import import_model

    manifest = import_model(cfg)
    print(cfg.ckpt.output_dir)
    return manifest


if __name__ == "__main__":
    run_main(main)
