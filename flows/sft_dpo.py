"""The `sft-dpo` flow: SFT, then a preference stage on the SFT model — DPO (IPO and cDPO through
DPO's `--ipo` / `--label_smoothing`, e.g. `preference={"ipo": true}`) or KTO — each a Ray job
through the stage runner (skipped when committed, retried from its checkpoint). The most common
offline recipe.

    prefect deployment run 'sft-dpo/smollm2' --param pretrain=s3://bucket/models/smollm2

Parameters: `pretrain` (the model SFT starts from: a committed store URI, a directory or a hub
name; `python -m alignment.cli.import_model` brings one into the store), the recipe (a folder of
stage YAMLs: `sft.yaml`, `dpo.yaml` / `kto.yaml`; none: schema defaults), per stage overrides, the
preference stage (`dpo` or `kto`), the store URI, the Ray address (none: a local head for this run), the run name.
"""

from typing import Any, Literal

from alignflow.tasks.flow_run import FlowRun, run_stages
from alignflow.tasks.params import DPOOverrides, KTOOverrides, SFTOverrides, checked_flow, overrides
from alignflow.tasks.pipeline import Output, Step, flow_sets


@checked_flow(name="sft-dpo")
async def sft_dpo_flow(
    pretrain: str,
    run_name: str = "sft-dpo",
    store: str = "runs/store",
    ray_address: str | None = None,
    recipe: str | None = None,
    sft: SFTOverrides | None = None,
    preference_stage: Literal["dpo", "kto"] = "dpo",
    preference: DPOOverrides | KTOOverrides | None = None,
    retries: int = 2,
) -> dict[str, Any]:
    """Each stage's result: model URI, skipped or trained, final metrics, wall time. Ends with a
    report artifact."""
    steps = [
        Step("sft", "sft", "sft", flow_sets("sft", overrides(sft), pretrain=pretrain)),
        Step(preference_stage, preference_stage, preference_stage, overrides(preference), {"pretrain": Output("sft")}),
    ]
    return await run_stages(FlowRun("sft-dpo", run_name, store, recipe, ray_address, retries), lambda _: steps)
