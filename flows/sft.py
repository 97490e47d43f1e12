"""The `sft` flow: one SFT stage (plus the tiny world's random-init base when no model is given).

    prefect deployment run 'sft/tiny' --param sft='{"max_steps": 200}'

Parameters: the stage config as a YAML file (`sft_config_file`, same format as the CLI's
--config) plus `sft` overrides (any SFT flag name), the store URI, the Ray address, the run name.
"""

import time
from typing import Any


from alignflow.tasks.params import SFTOverrides, checked_flow, overrides as plain
from alignflow.tasks.ray_cluster import ray_cluster
from alignflow.tasks.report import build_report, publish_report
from alignflow.tasks.stage import stage_runner
from alignflow.tasks.stage_spec import StageResult, build_config, check_store, check_store_reachable, repo_path

TINY_SFT_CONFIG = str(repo_path("deployments", "configs", "tiny_sft.yaml"))


@checked_flow(name="sft")
async def sft_flow(run_name: str = "tiny", store: str = "runs/store", ray_address: str | None = None,
                   sft_config_file: str | None = TINY_SFT_CONFIG, sft: SFTOverrides | None = None,
                   retries: int = 2) -> dict[str, Any]:
    """SFT as a Ray job. With no `pretrain` in the config, a seeded tiny random-init base is made first."""
    started = time.monotonic()
    # Everything that can be wrong with the parameters fails here, before a cluster starts.
    store = check_store_reachable(check_store(store))
    overrides = plain(sft)
    needs_base = not overrides.get("pretrain") and not config_has_pretrain(sft_config_file)
    build_config("sft", sft_config_file, {**overrides, **({"pretrain": "<tiny_base output>"} if needs_base else {})})
    stages: dict[str, StageResult] = {}
    with ray_cluster(ray_address) as cluster:
        run = stage_runner(retries)
        inputs = {}
        if needs_base:
            stages["tiny_base"] = await run("tiny_base", store, run_name, cluster, overrides={"seed": 0})
            inputs["pretrain"] = stages["tiny_base"].model_uri
        stages["sft"] = await run("sft", store, run_name, cluster, sft_config_file, overrides, inputs)
    report = build_report("sft", run_name, {k: r.summary() for k, r in stages.items()}, time.monotonic() - started)
    await publish_report(report)
    return stages["sft"].summary()


def config_has_pretrain(path: str | None) -> bool:
    from alignment.config import SFTConfig, load_yaml

    return bool(path and load_yaml(SFTConfig, path).get("pretrain"))  # a missing file is a ConfigError
