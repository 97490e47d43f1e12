"""The `distill` flow: a teacher → a student trained from it, by knowledge distillation on a dataset's
responses (`train_kd`) or on-policy distillation on the student's own samples (`train_opd`).

    prefect deployment run 'distill/tiny' --param teacher=runs/store/tiny/ppo-1a2b3c4d/model
    prefect deployment run 'distill/tiny' --param teacher=... --param method=opd

The student starts from SFT's model ([tiny_base →] sft, the recipe's `sft.yaml`; `sft={"pretrain": ...}` starts
from a model of yours). `teacher` is a model folder, a committed store URI or a hub name with the student's
tokenizer (checked before weights load). With `heldout_eval` the report has the teacher's, the student's before
and the student's after held-out accuracy (the tiny world's questions); the teacher's result is saved in this
run's folder of the store, never beside a model the run did not make.
"""

from typing import Any, Literal

from alignflow.tasks.orchestration.flow_run import FlowRun, run_stages
from alignflow.tasks.orchestration.flow_steps import sft_steps
from alignflow.tasks.orchestration.params import KDOverrides, OPDOverrides, SFTOverrides, checked_flow, overrides
from alignflow.tasks.orchestration.pipeline import Output, Step
from alignflow.tasks.orchestration.recipes import Recipe
from alignment.config import ConfigError


@checked_flow(name="distill")
async def distill_flow(
    teacher: str,
    method: Literal["kd", "opd"] = "kd",
    run_name: str = "distill",
    store: str = "runs/store",
    ray_address: str | None = None,
    recipe: str | None = None,
    sft: SFTOverrides | None = None,
    kd: KDOverrides | None = None,
    opd: OPDOverrides | None = None,
    retries: int = 2,
    heldout_eval: bool = False,
) -> dict[str, Any]:
    """Each stage's result (model URI, skipped or trained, final metrics, wall time); with `heldout_eval` also
    the held-out accuracy of the teacher (under "teacher"), the student before ("sft") and after. Ends with a
    report artifact."""
    unused = "opd" if method == "kd" else "kd"
    if overrides(opd if method == "kd" else kd):  # they would be accepted and never used
        raise ConfigError(
            f"distill: method={method} runs the {method} stage; the {unused} overrides would be "
            f"ignored: move them to {method}= or set method={unused}"
        )
    given = overrides(kd if method == "kd" else opd)
    return await run_stages(
        FlowRun("distill", run_name, store, recipe, ray_address, retries),
        lambda r: distill_steps(r, overrides(sft), method, teacher, given),
        ("sft", method) if heldout_eval else (),
        {"teacher": teacher} if heldout_eval else {},
    )


def distill_steps(recipe: Recipe, sft: dict, method: str, teacher: str, student: dict) -> list[Step]:
    """[tiny_base,] sft, then kd or opd from the SFT model towards `teacher`."""
    return sft_steps(recipe, sft) + [
        Step(method, method, method, student, {"pretrain": Output("sft"), "teacher_model": teacher})
    ]
