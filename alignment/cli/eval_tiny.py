"""python -m alignment.cli.eval_tiny --pretrain DIR [--limit N]: held-out accuracy on the arithmetic task."""
import argparse
import json

from alignment.tiny_world.evaluate import greedy_accuracy

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pretrain", required=True)
    p.add_argument("--eval_file", default=None)
    p.add_argument("--limit", type=int, default=None)
    a = p.parse_args()
    r = greedy_accuracy(a.pretrain, a.eval_file, a.limit)
    print(json.dumps({"accuracy": r.accuracy, "n": r.n, "examples": r.examples}, indent=1))
