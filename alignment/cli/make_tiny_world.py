"""python -m alignment.cli.make_tiny_world [--out data/tiny]: regenerate the shipped tiny world."""

import argparse

from alignment.tiny_world.build import build
from alignment.tiny_world.paths import tiny_dir

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=str(tiny_dir()))
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    print(build(a.out, a.seed))
