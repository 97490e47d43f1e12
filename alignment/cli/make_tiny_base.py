"""python -m alignment.cli.make_tiny_base --save_path DIR_OR_URI [--seed 0] [--arch llama|mixtral|llava]: a
random-init tiny Llama (committed with a MANIFEST) to start SFT from; `--arch llava` the tiny visual world's
LLaVA with its processor. `--out` is accepted as an alias of --save_path."""

from __future__ import annotations

import sys

from alignment.cli.common import run_main
from alignment.config import parse_args
from alignment.config.tools import TinyBaseConfig


def main(argv: list[str] | None = None) -> str:
    argv = sys.argv[1:] if argv is None else argv
    argv = ["--save_path" if a == "--out" else a for a in argv]
    cfg = parse_args(TinyBaseConfig, argv, prog="alignment.cli.make_tiny_base")
    from alignment.tiny_world.base_model import make_base_committed

    uri = make_base_committed(cfg.ckpt.output_dir, cfg.train.seed, cfg.model.arch)
    print(uri)
    return uri


if __name__ == "__main__":
    run_main(main)
