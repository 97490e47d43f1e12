"""python -m alignment.cli.eval_tiny --pretrain DIR|URI [--limit N] [--save_json URI]: held-out
greedy accuracy on the arithmetic task, printed as JSON. --save_json writes the JSON into the store
(atomically), next to the model it measured, and prints one line; the pipeline reads it from there."""

import argparse
import json

from alignment import storage

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pretrain", required=True)
    p.add_argument("--eval_file", default=None)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--save_json", default=None)
    a = p.parse_args()
    # the flags are checked: the model code loads from here (this CLI's start-up boundary)
    from alignment.models.loading import resolve_model_path
    from alignment.tiny_world.evaluate import greedy_accuracy

    r = greedy_accuracy(resolve_model_path(a.pretrain), a.eval_file, a.limit)
    text = json.dumps({"accuracy": r.accuracy, "n": r.n, "examples": r.examples}, indent=1)
    if a.save_json:
        # one line, not the JSON: a pipeline streams this job's output into its flow log
        storage.write_text_atomic(a.save_json, text)
        print(f"held-out greedy accuracy {r.accuracy:.1%} of {r.n} questions, saved to {a.save_json}")
    else:
        print(text)
