"""The `conditional-sft` flow (SteerLM / OpenRLHF's csft): score a dataset of responses →
prefix each prompt with its reward (batch_inference, csft post-processor) → SFT of the policy on
the prefixed rows → generate with a chosen score in the prefix, scored again.

    prefect deployment run 'conditional-sft/tiny' --param policy=<SFT model>

`csft_rewards` lists the scores asked for at generation, one batch_inference stage each
(default [1.0, 0.0]: the first is "the" generation, the others show how much the prefix steers). Returns each stage's
result and, per asked-for score, the mean reward of what was generated.
"""

from typing import Any

from prefect import get_run_logger

from alignflow.tasks.orchestration.flow_run import FlowRun, Pipeline, run_pipeline
from alignflow.tasks.orchestration.params import GenerateOverrides, SFTOverrides, checked_flow, overrides
from alignflow.tasks.orchestration.pipeline import Output, Step, flow_sets
from alignflow.tasks.orchestration.recipes import Recipe
from alignflow.tasks.orchestration.stage_spec import build_config
from alignment import storage
from alignment.config import ConfigError


@checked_flow(name="conditional-sft")
async def conditional_sft_flow(
    policy: str,
    run_name: str = "conditional-sft",
    store: str = "runs/store",
    ray_address: str | None = None,
    recipe: str | None = None,
    score: GenerateOverrides | None = None,
    sft: SFTOverrides | None = None,
    generate: GenerateOverrides | None = None,
    csft_rewards: list[float] | None = None,
    retries: int = 2,
) -> dict[str, Any]:
    """The recipe's `score.yaml`, `sft.yaml` and `generate.yaml` configure the three stages (e.g.
    `recipe="tiny-csft"`)."""
    csft_rewards = [1.0, 0.0] if csft_rewards is None else list(csft_rewards)
    if not csft_rewards:
        raise ConfigError("csft_rewards is empty: give the score(s) to ask for at generation, e.g. [1.0]")
    run = FlowRun("conditional-sft", run_name, store, recipe, ray_address, retries)
    steps = lambda r: csft_steps(r, policy, overrides(score), overrides(sft), overrides(generate), csft_rewards)  # noqa: E731
    results = (await run_pipeline(run, Pipeline(steps))).results
    scored, trained = results["score"], results["sft"]
    out: dict[str, Any] = {
        "scored": storage.file_in(scored.model_uri, "output.jsonl"),
        "scored_rows": scored.metrics.get("rows"),
        "scored_mean_reward": scored.metrics.get("mean_reward"),
        "model_uri": trained.model_uri,
        "sft_metrics": trained.metrics,
        "generated": {},
    }
    for r in csft_rewards:
        gen = results[f"generate (score {r})"]
        out["generated"][str(r)] = {
            "output": storage.file_in(gen.model_uri, "output.jsonl"),
            "mean_reward": gen.metrics.get("mean_reward"),
        }
        get_run_logger().info(
            "generation with score %s in the prefix: mean reward %s", r, gen.metrics.get("mean_reward")
        )
    return out


def csft_steps(
    recipe: Recipe, policy: str, score: dict, sft: dict, generate: dict, csft_rewards: list[float]
) -> list[Step]:
    """score, sft on the scored rows, then one generation per asked-for score, prefixed as SFT learned it."""
    score_step = Step("score", "batch_inference", "score", flow_sets("score", score, pretrain=policy))
    generate = flow_sets(
        "generate", generate, enable_csft=True, csft_prompt=learned_prefix(recipe, score_step.overrides)
    )
    return [
        score_step,
        Step("sft", "sft", "sft", flow_sets("sft", sft, pretrain=policy), {"dataset": Output("score", "output.jsonl")}),
        *(
            Step(
                f"generate (score {r})",
                "batch_inference",
                "generate",
                flow_sets("generate", generate, csft_reward=r),
                {"pretrain": Output("sft")},
            )
            for r in csft_rewards
        ),
    ]


def learned_prefix(recipe: Recipe, score: dict) -> str:
    """The prefix template the SFT stage learns: the recipe's score.yaml (with `score`'s overrides, the policy
    among them) must write it with the csft post-processor; generation and evaluation ask with the same one."""
    score_cfg = build_config("batch_inference", recipe.file("score"), score)
    if score_cfg.generate.post_processor != "csft":
        raise ConfigError(
            f"the scoring stage must use post_processor: csft (got {score_cfg.generate.post_processor!r})"
        )
    return score_cfg.generate.csft_prompt
