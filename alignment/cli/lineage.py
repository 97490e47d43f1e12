"""python -m alignment.cli.lineage URI_OR_PATH [--json]: the chain of models a committed model was
trained from, back to its base, read from their model cards (alignment/lineage.py). One line per
model, newest first: stage, URI, base model, key metric; --json prints the hops as a JSON list."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from alignment.cli.common import run_main


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="alignment.cli.lineage", description=__doc__.split(":", 1)[1].strip())
    parser.add_argument("model", metavar="URI_OR_PATH", help="A committed model: local folder or store URI (s3://...)")
    parser.add_argument("--json", action="store_true", help="Print the hops as JSON (with every parent and metric)")
    args = parser.parse_args(argv)
    from alignment.lineage import lines, walk

    hops = walk(args.model)
    rows = [{**asdict(h), "parent": h.parent} for h in hops]
    print(json.dumps(rows, indent=2) if args.json else "\n".join(lines(hops)))
    return rows


if __name__ == "__main__":
    run_main(main)
