"""python -m alignment.cli.make_tiny_base --out DIR [--seed 0]: a random-init tiny Llama to start SFT from."""
import argparse

from alignment.tiny_world.base_model import make_base

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    print(make_base(a.out, a.seed))
