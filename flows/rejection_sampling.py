"""The `rejection-sampling` flow: rounds of generate best-of-n with the current policy → score →
keep the best response per prompt (batch_inference with the rs post-processor) → SFT of the
current policy on the kept samples → commit → advance the policy pointer.

    prefect deployment run 'rejection-sampling/tiny' --param initial_policy=<SFT model> --param rounds=2

Like iterative-dpo, a run continues from the latest committed policy of its `run_name` in the
store, and a failed round leaves the pointer where it was.
"""

from dataclasses import asdict
from typing import Any


from alignflow.tasks.params import GenerateOverrides, SFTOverrides, checked_flow
from alignflow.flows.policy_rounds import policy_rounds
from alignflow.tasks.stage_spec import repo_path

CONFIGS = repo_path("deployments", "configs")


@checked_flow(name="rejection-sampling")
async def rejection_sampling_flow(run_name: str = "tiny-rs", store: str = "runs/store", ray_address: str | None = None,
                                  initial_policy: str | None = None, rounds: int = 1,
                                  generate_config_file: str | None = str(CONFIGS / "tiny_rs_generate.yaml"),
                                  generate: GenerateOverrides | None = None,
                                  sft_config_file: str | None = str(CONFIGS / "tiny_rs_sft.yaml"),
                                  sft: SFTOverrides | None = None, retries: int = 2,
                                  restart: bool = False) -> dict[str, Any]:
    """Runs `rounds` rounds; returns the policy pointer (round, model URI, history). `restart`: start
    again from `initial_policy` although the run already has a policy."""
    pointer = await policy_rounds(flow_name="rejection-sampling", train_stage="sft", run_name=run_name, store=store, ray_address=ray_address,
                                  initial_policy=initial_policy, rounds=rounds,
                                  generate_config_file=generate_config_file, generate=generate,
                                  train_config_file=sft_config_file, train=sft, retries=retries, restart=restart)
    return asdict(pointer)
