"""Does each method lift held-out accuracy? Every method trains from the same SFT model with its shipped recipe
(deployments/recipes/<recipe>/), on each seed; the recipe's `evaluate` stage measures every model on the same
held-out questions. Writes a markdown page (a table and a chart) and a JSON of every figure.

    .venv/bin/python benchmarks/learning.py [SFT_MODEL] [--methods dpo,grpo-rule,...] [--seeds 42,43,44]

SFT_MODEL defaults to `benchmarks/tiny_sft`, the tiny recipe's SFT model as shipped: retrained on another CPU
family, `sft.yaml` gives another model (its held-out accuracy 62.7 % on an Intel Xeon, 75.0 % on an AMD EPYC),
and a row is comparable with the page only from the same weights. `--recipe` picks the shipped recipe whose
files configure the stages (default `tiny`, the tiny world); `smollm2` measures SmolLM2-135M-Instruct on the
shipped sums (its grpo.yaml, rm.yaml, ppo.yaml and evaluate.yaml), from that recipe's SFT model (give it).

Everything runs as the flows run it: one Prefect flow, each stage a Ray job (a local head unless
--ray_address), committed to --store under an identity of its config and inputs. So a benchmark killed
half-way and run again skips every stage it committed and trains only the rest; a skipped stage's wall time
is the one its task recorded beside its model (`wall.json`) when it was trained.
`--budget '{"ppo": {"max_samples": 64}}'` overrides stage kinds' settings for every method (a smaller run; the
page says so). Iterative DPO and rejection sampling run 3 rounds
each, configured by the tiny-idpo and tiny-rs recipes, as their flows run them without a gate; conditional SFT
runs the tiny-csft recipe's score and sft stages, and is evaluated asking for a score of 1.0 (its row), of 0.0
and with no prefix (how much it steers). Distillation (kd, kd-coef-0, opd) trains the SFT start towards the
grpo-rule model of the same seed, as the distill flow does with the tiny recipe's kd.yaml and opd.yaml. Agent RL
(agent-grpo) is grpo.yaml's stage through the multi-turn environment data/tiny/agent_retry.py (the sft-grpo/tiny-agent
deployment's); its row is the held-out greedy first answer, as every row's.

Methods can be measured a few at a time: the JSON keeps the rows an earlier run measured from the same SFT
start, each with the command that measured it, as long as the recipe files its stages read are unchanged (a
row whose file changed goes: it measured another recipe); `benchmarks/learning_notes.md` (what moved the
numbers) goes under the table.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import sys
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# the tiny page's SFT start, shipped: the same weights on every machine (retraining it is not, see the docstring)
SHIPPED_START = REPO / "benchmarks" / "tiny_sft"

from prefect import flow  # noqa: E402
from prefect.exceptions import TerminationSignal  # noqa: E402

from alignflow.tasks.orchestration.evaluate import read_evaluation  # noqa: E402
from alignflow.tasks.orchestration.flow_run import FlowRun, Pipeline, run_pipeline  # noqa: E402
from alignflow.tasks.orchestration.interrupted import sigterm_as_ctrl_c, summary_line  # noqa: E402
from alignflow.tasks.orchestration.pipeline import Step  # noqa: E402
from alignflow.tasks.orchestration.recipes import Recipe, load_recipe  # noqa: E402
from alignflow.tasks.orchestration.stage import recorded_wall_s  # noqa: E402
from alignflow.tasks.orchestration.stage_spec import absolute_input, check_store  # noqa: E402
from alignment.config import ConfigError  # noqa: E402
from alignment.storage.manifest import read_manifest  # noqa: E402
from benchmarks.learning_methods import METHODS, Steered, own_recipe, steps  # noqa: E402
from benchmarks.learning_page import cpu_model, kept, write_page  # noqa: E402


@flow(name="learning-benchmark")
async def learning_flow(
    sft: str, methods: list[str], seeds: list[int], budget: dict, store: str, ray_address: str | None, recipe: str
) -> dict:
    run = FlowRun("learning-benchmark", "learning", store, recipe, ray_address, 1)
    # a Ray head is started only if a stage is not committed yet
    results = (await run_pipeline(run, Pipeline(lambda _: steps(sft, methods, seeds, budget)))).results
    return {
        name: {"model_uri": r.model_uri, "skipped": r.skipped, "wall_s": r.wall_s, "metrics": r.metrics}
        for name, r in results.items()
    } | {
        f"{name} heldout": read_evaluation(r.model_uri)["metrics"]
        for name, r in results.items()
        if name.startswith("evaluate ")
    }


def summarise(results: dict, methods: list[str], seeds: list[int], previous: dict) -> dict:
    """Per method: accuracy per seed, mean, spread (population std), gain over the SFT start, mean wall time
    of its training stages, a round-based method's generations included (from the run that trained each: a
    skipped stage keeps the time recorded then)."""
    known = {
        uri: wall
        for row in previous.get("methods", {}).values()
        for run in row["runs"]
        for uri, wall in run.get("stage_walls", {run["model_uri"]: run["wall_s"]}).items()
    }
    sft = results["evaluate sft heldout"]["accuracy"]
    rows = {}
    for m in methods:
        runs = []
        for seed in seeds:
            name = f"{m} seed {seed}"
            parts = (f"{name} generate ", f"{name} round ", f"{name} score")
            mine = [r for n, r in results.items() if n == name or n.startswith(parts)]
            walls = {r["model_uri"]: stage_wall(r, known) for r in mine}
            runs.append(
                {
                    "seed": seed,
                    "accuracy": results[f"evaluate {name} heldout"]["accuracy"],
                    "wall_s": round(sum(walls.values()), 1),
                    "model_uri": results[name]["model_uri"],
                    "stage_walls": {uri: round(w, 1) for uri, w in walls.items()},
                    **steering(results, name, METHODS[m]),
                }
            )
        accs = [x["accuracy"] for x in runs]
        rows[m] = {
            "stage": METHODS[m].stage,
            "reward": METHODS[m].reward or "offline (preference data)",
            "runs": runs,
            "mean": statistics.fmean(accs),
            "spread": statistics.pstdev(accs),
            "gain": statistics.fmean(accs) - sft,
            "wall_s": statistics.fmean(x["wall_s"] for x in runs),
            "measured": {"date": date.today().isoformat(), "seeds": seeds},
        }
    return {"sft_accuracy": sft, "methods": rows}


def stage_wall(result: dict, known: dict[str, float]) -> float:
    """A stage's wall time: this run's, or for a skipped stage the one recorded beside its model when it was
    made (by this benchmark into another JSON, or by any flow), else this JSON's earlier figure, else 0."""
    if not result["skipped"]:
        return result["wall_s"]
    recorded = recorded_wall_s(result["model_uri"])
    return recorded if recorded is not None else known.get(result["model_uri"], 0.0)


def steering(results: dict, name: str, method: object) -> dict:
    """A conditional-SFT run's other evaluations: {"steered": {asked score: accuracy, "none": without the
    prefix}} (the run's accuracy is the first asked-for score's); nothing for the other methods."""
    if not isinstance(method, Steered):
        return {}
    first, *others = method.asked
    return {
        "steered": {
            str(first): results[f"evaluate {name} heldout"]["accuracy"],
            **{str(r): results[f"evaluate {name} asked {r} heldout"]["accuracy"] for r in others},
            "none": results[f"evaluate {name} unsteered heldout"]["accuracy"],
        }
    }


def weights_digest(model_uri: str) -> str:
    """The SFT start's weights, by their committed sha256s: a model retrained at the same path (another
    machine's kernels round differently) is another start, whatever its accuracy."""
    files = read_manifest(model_uri)["files"]
    shas = sorted((name, f["sha256"]) for name, f in files.items() if name.endswith(".safetensors"))
    return hashlib.sha256(json.dumps(shas).encode()).hexdigest()[:16]


def missing_files(recipe: Recipe, planned: list[Step]) -> list[str]:
    """The recipe files the planned stages need and the recipe lacks (`tiny` has them all; `smollm2` has the
    RL, reward-model and evaluation files)."""
    return sorted({f"{step.role}.yaml" for step in planned if not recipe.has(step.role)})


def recipe_digest(recipe: Recipe, method: str) -> str | None:
    """The recipe files method `method`'s stages read (the reward model's and the evaluation's included), by
    their content: a row measured before one of them changed measured another recipe. None when the recipe
    lacks one of them (the method cannot run with it)."""
    planned = steps("sft", [method], [0], {})
    if missing_files(recipe, planned):
        return None
    digest = hashlib.sha256()
    for role in sorted({step.role for step in planned}):
        digest.update(role.encode() + b"\0" + Path(recipe.file(role)).read_bytes() + b"\0")
    env = getattr(METHODS[method], "settings", {}).get("agent_func_path")
    if env:  # the environment is the method's reward: a row measured before it changed measured another one
        digest.update(env.encode() + b"\0" + (REPO / env).read_bytes())
    return digest.hexdigest()[:16]


class Refused(Exception):
    """A command line that can't be measured: its one line goes to stderr, and the exit status is 2."""


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "sft",
        nargs="?",
        help=f"the SFT model every method starts from (a committed folder or store URI); with --recipe tiny, "
        f"default {SHIPPED_START.relative_to(REPO)} (the page's start)",
    )
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of: {', '.join(METHODS)}")
    p.add_argument("--seeds", default="42,43,44")
    p.add_argument("--budget", default="{}", help='JSON {stage kind: settings}, e.g. {"ppo": {"max_samples": 64}}')
    p.add_argument("--recipe", default="tiny", help="the shipped recipe (or folder) whose files configure the stages")
    p.add_argument("--store", default="runs/learning", help="where every stage commits (a rerun skips them)")
    p.add_argument("--ray_address", default=None, help="a running cluster's job API; default: a local head")
    p.add_argument("--out", default="docs/learning.md")
    p.add_argument("--json", default="benchmarks/results/learning.json")
    p.add_argument("--chart", default="docs/img/learning.png")
    notes = REPO / "benchmarks" / "learning_notes.md"
    p.add_argument("--notes", default=str(notes), help="markdown put under the table (what moved the numbers)")
    p.add_argument("--page_only", action="store_true", help="rewrite the page and chart from --json and --notes")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        return rewrite_page(args) if args.page_only else measure(args, argv)
    except Refused as e:
        print(e, file=sys.stderr)
        return 2


def rewrite_page(args: argparse.Namespace) -> int:
    """--page_only: the page and chart again from --json, rows marked stale by the recipe they were measured with."""
    out_json = Path(args.json)
    if not out_json.exists():
        raise Refused(f"--page_only: {out_json} does not exist; run the benchmark first")
    summary = json.loads(out_json.read_text())
    try:  # the recipe the figures were measured with (not --recipe): its files tell which rows are stale
        recipe = load_recipe(summary.get("recipe", "tiny"))
    except ConfigError as e:
        raise Refused(f"{out_json}: its recipe: {e}") from None
    write_page(summary, args, {m: recipe_digest(recipe, m) for m in summary.get("methods", {})})
    return 0


def checked(args: argparse.Namespace, methods: list[str], seeds: list[int], budget: dict) -> tuple[str, Recipe]:
    """The start's URI and the recipe, once every method can run from them; Refused names the first that can't."""
    if not args.sft and args.recipe != "tiny":
        raise Refused(f"--recipe {args.recipe}: give the SFT model every method starts from (or --page_only)")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise Refused(f"--methods: unknown {', '.join(unknown)}; pick from {', '.join(METHODS)}")
    sft_uri = absolute_input(args.sft or str(SHIPPED_START))
    if read_manifest(sft_uri) is None:  # rows are kept by the start's committed weights (weights_digest)
        raise Refused(
            f"{args.sft or SHIPPED_START}: not a committed model (no MANIFEST.json); give an SFT stage's output"
        )
    try:
        recipe = load_recipe(args.recipe)
    except ConfigError as e:
        raise Refused(f"--recipe: {e}") from None
    for m in methods:  # round recipes (tiny-idpo, tiny-rs, tiny-csft), an agent's environment
        own = own_recipe(METHODS[m])
        if own not in (None, args.recipe):
            raise Refused(f"--methods {m}: its rounds or environment are {own}'s; measure it with --recipe {own}")
    missing = missing_files(recipe, steps(sft_uri, methods, seeds, budget))
    if missing:  # a stage with no recipe file would start from the schema's defaults: another method
        raise Refused(f"--recipe {args.recipe}: has no {', '.join(missing)} for --methods {args.methods}")
    return sft_uri, recipe


def measure(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Run every method's stages (a rerun skips the committed ones), then write the JSON and the page."""
    methods, budget = [m for m in args.methods.split(",") if m], json.loads(args.budget)
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.monotonic()
    sft_uri, recipe = checked(args, methods, seeds, budget)
    store = check_store(args.store)
    got = sigterm_as_ctrl_c()
    try:
        results = asyncio.run(learning_flow(sft_uri, methods, seeds, budget, store, args.ray_address, args.recipe))
    except (KeyboardInterrupt, TerminationSignal) as e:  # Prefect turns SIGTERM into TerminationSignal mid-flow
        print(summary_line(store, "learning", "the same command"), file=sys.stderr)
        return 128 + int(getattr(e, "signal", got["signal"]))
    out_json = Path(args.json)
    previous = json.loads(out_json.read_text()) if out_json.exists() else {}
    summary = summarise(results, methods, seeds, previous)
    summary = {"recipe": args.recipe, "sft": sft_uri, "sft_weights": weights_digest(sft_uri), **summary}
    summary["wall_s"] = round(time.monotonic() - started, 1)
    command = "benchmarks/learning.py " + " ".join(argv if argv is not None else sys.argv[1:])
    how = f"measured {date.today().isoformat()} on {cpu_model()} by `{command}`" + (
        f", with budgets overridden: `{json.dumps(budget)}`" if budget else " (the shipped recipes)"
    )
    digests = {m: recipe_digest(recipe, m) for m in METHODS}
    for m, row in summary["methods"].items():
        row["measured"]["how"] = how
        row["recipe_digest"] = digests[m]
    summary["methods"] = kept(previous, summary, digests) | summary["methods"]
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(summary, indent=1) + "\n")
    write_page(summary, args, digests)
    print(f"wrote {args.out}, {out_json} and {args.chart} in {summary['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
