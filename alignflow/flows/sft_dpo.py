"""The `sft-dpo` flow: SFT, then a preference stage on the SFT model — DPO (IPO and cDPO through
DPO's `--ipo` / `--label_smoothing`, e.g. `preference={"ipo": true}`) or KTO — each a Ray job
through the stage runner (skipped when committed, retried from its checkpoint). The most common
offline recipe.

    prefect deployment run 'sft-dpo/smollm2' --param pretrain=s3://bucket/models/smollm2
    prefect deployment run 'sft-dpo/tiny-vision'     # the recipe makes its base: no pretrain

Parameters: `pretrain` (the model SFT starts from: a committed store URI, a directory or a hub
name; `python -m alignment.cli.import_model` brings one into the store; none when the recipe makes its
base), the recipe (a folder of
stage YAMLs: `sft.yaml`, `dpo.yaml` / `kto.yaml`; none: schema defaults), per stage overrides, the
preference stage (`dpo` or `kto`), the store URI, the Ray address (none: a local head for this run), the run name,
and `heldout_eval` (the recipe's evaluate.yaml on the SFT and preference models, in the report).
"""

from typing import Any, Literal

from alignflow.tasks.orchestration.flow_run import FlowRun, run_stages
from alignflow.tasks.orchestration.flow_steps import given_pretrain, sft_steps
from alignflow.tasks.orchestration.params import DPOOverrides, KTOOverrides, SFTOverrides, checked_flow, overrides
from alignflow.tasks.orchestration.pipeline import Output, Step, flow_sets
from alignflow.tasks.orchestration.recipes import Recipe
from alignment.config import ConfigError


@checked_flow(name="sft-dpo")
async def sft_dpo_flow(
    pretrain: str | None = None,
    run_name: str = "sft-dpo",
    store: str = "runs/store",
    ray_address: str | None = None,
    recipe: str | None = None,
    sft: SFTOverrides | None = None,
    preference_stage: Literal["dpo", "kto"] = "dpo",
    preference: DPOOverrides | KTOOverrides | None = None,
    retries: int = 2,
    heldout_eval: bool = False,
) -> dict[str, Any]:
    """Each stage's result: model URI, skipped or trained, final metrics, wall time; with `heldout_eval` also
    the SFT and preference models' held-out evaluation (the recipe's `evaluate.yaml`). Ends with a report
    artifact."""

    def steps(recipe_: Recipe) -> list[Step]:
        given = flow_sets("sft", overrides(sft), pretrain=pretrain) if pretrain else overrides(sft)
        if not (given_pretrain(recipe_, given) or recipe_.has("tiny_base")):
            raise ConfigError(
                "sft-dpo: give `pretrain` (the model SFT starts from), or a recipe that makes its base model "
                "(a tiny_base.yaml, as tiny-vision has)"
            )
        pref = overrides(preference)
        return sft_steps(recipe_, given) + [
            Step(preference_stage, preference_stage, preference_stage, pref, {"pretrain": Output("sft")})
        ]

    return await run_stages(
        FlowRun("sft-dpo", run_name, store, recipe, ray_address, retries),
        steps,
        ("sft", preference_stage) if heldout_eval else (),
    )
