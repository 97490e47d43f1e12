"""python -m alignment.cli.make_tiny_world [--out data/tiny] [--vision]: regenerate the shipped tiny world
(--vision: the tiny visual world, data/tiny_vision)."""

import argparse

from alignment.tiny_world.paths import tiny_dir, tiny_vision_dir

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=None, help="default: data/tiny, or data/tiny_vision with --vision")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vision", action="store_true", help="the tiny visual world (pictures of sums, a tiny LLaVA)")
    a = p.parse_args()
    if a.vision:
        from alignment.tiny_world.vision_model import build_vision

        print(build_vision(a.out or tiny_vision_dir(), a.seed))
    else:
        from alignment.tiny_world.build import build

        print(build(a.out or tiny_dir(), a.seed))
