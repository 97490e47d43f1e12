"""Place a stage's ranks on a Ray cluster with Ray Train, each rank running the stage's own CLI.

`--num_nodes x --num_gpus_per_node` ranks (OpenRLHF's names for a group's size) are started by
`ray.train.torch.TorchTrainer` in one placement group (`--placement_strategy`, PACK by default).
Ray Train sets each rank's torch.distributed environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*)
and opens the process group (NCCL on GPUs, gloo on CPUs); the rank then runs exactly what
`torchrun` would run, so losses match a `torchrun` run of the same config. The process that calls
this holds no accelerator: on a Ray job it is the job's driver, and only the ranks hold GPUs (or,
on a CPU cluster, one CPU each).

Which path a CLI takes (`on_ray`): under `torchrun`/`deepspeed` (RANK set) it is one of the
launcher's ranks; otherwise, when it runs as a Ray job (RAY_ADDRESS set, as every pipeline stage
does) or asks for more than one rank, it places its ranks on Ray; otherwise it trains in-process.
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from alignment.config.base import ConfigError
from alignment.config.groups import RanksConfig

log = logging.getLogger(__name__)


def world_size(cfg: RanksConfig) -> int:
    return cfg.ranks()


def on_ray(cfg: RanksConfig) -> bool:
    """True when this process should place the ranks on Ray rather than train itself."""
    if "RANK" in os.environ:   # a rank already: started by torchrun, deepspeed or Ray Train
        launched = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size(cfg) not in (1, launched):
            raise ConfigError(f"{cfg.ranks_flags()} = {world_size(cfg)} ranks, but the launcher started {launched}: "
                              f"under torchrun/deepspeed the launcher sets the world size; drop the flags or make "
                              f"them match")
        return False
    return world_size(cfg) > 1 or bool(os.environ.get("RAY_ADDRESS"))


def check_resources(cfg: RanksConfig, total: dict[str, float]) -> tuple[bool, dict[str, float]]:
    """(use GPUs, resources of one rank), or one ConfigError naming what the cluster lacks.
    A rank takes a GPU and a CPU on a GPU cluster, one CPU on a CPU-only cluster."""
    gpu = total.get("GPU", 0) > 0
    bundle = {"GPU": 1.0, "CPU": 1.0} if gpu else {"CPU": 1.0}
    n = world_size(cfg)
    if cfg.accelerator_type and f"accelerator_type:{cfg.accelerator_type}" not in total:
        have = sorted(k.split(":", 1)[1] for k in total if k.startswith("accelerator_type:")) or ["none"]
        raise ConfigError(f"--accelerator_type {cfg.accelerator_type}: the Ray cluster has no such accelerator "
                          f"(it has: {', '.join(have)}); drop the flag or add nodes with {cfg.accelerator_type}")
    for kind, per_rank in bundle.items():
        need, have = n * per_rank, total.get(kind, 0)
        if need > have:
            each = "a GPU and a CPU per rank" if gpu else "one CPU per rank: this Ray cluster has no GPUs"
            raise ConfigError(f"{cfg.ranks_flags()} = {n} ranks need {need:g} {kind} ({each}), but the Ray cluster has {have:g}; use fewer ranks "
                              f"or add nodes")
    return gpu, bundle


def bundle_kind(gpu: bool) -> str:
    return "GPU" if gpu else "CPU"


def _user_error(err: BaseException) -> BaseException | None:
    """The ConfigError/DataError/... (exit 2) or transient fault (exit 75) a rank raised, if that is
    why the run failed: the driver re-raises it, so the job's exit status says so (not a crash)."""
    from alignment.errors import user_errors
    from alignment.errors import TransientError
    known = (*user_errors(), TransientError)
    seen: list[BaseException] = [err]
    while seen:
        e = seen.pop()
        cause = getattr(e, "cause", None)   # RayTaskError carries the rank's exception here
        if isinstance(cause, known):
            return cause
        if isinstance(e, known):
            return e
        seen += [x for x in (e.__cause__, cause, *getattr(e, "worker_failures", {}).values()) if x is not None]
    return None


def _rank_main(config: dict) -> None:
    """One rank (in a Ray Train worker): log where it runs, then the CLI's own main."""
    import ray

    from alignment.logs import setup_logging
    setup_logging(force=True)
    if os.path.isdir(config["cwd"]):   # relative paths mean what they meant to the user (shared or same-path file systems)
        os.chdir(config["cwd"])
    # every rank says where it landed (the job log shows whether SPREAD spread the ranks)
    print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} on Ray node "
          f"{ray.get_runtime_context().get_node_id()}", flush=True)
    config["main"](config["argv"])


def run_ranks(main: Callable[[list[str] | None], Any], argv: list[str] | None, cfg: RanksConfig, name: str) -> dict:
    """Run `main(argv)` on `world_size(cfg)` Ray Train ranks; returns after the last rank finished.
    A rank's input error is re-raised here (exit 2); any other rank failure fails the run."""
    import sys

    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    import alignment

    argv = list(sys.argv[1:] if argv is None else argv)
    # Ray Train's controller notices finished ranks at this interval (default 2 s): every stage would wait for it
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
    if not ray.is_initialized():
        ray.init(log_to_driver=True)     # inside a Ray job this joins the job's cluster
    total = ray.cluster_resources()
    gpu, bundle = check_resources(cfg, total)
    n = world_size(cfg)
    free = ray.available_resources().get(bundle_kind(gpu), 0)
    log.info("%s: placing %d rank(s) (%s per rank, %s) on the Ray cluster (%g %s, %g free)", name, n, bundle,
             cfg.placement_strategy, total.get(bundle_kind(gpu), 0), bundle_kind(gpu), free)
    log.info("%s: code from %s, working directory %s", name, Path(alignment.__file__).parent, os.getcwd())
    if free < n * bundle[bundle_kind(gpu)]:
        log.warning("%s: waiting for %g %s held by other work on the cluster", name,
                    n * bundle[bundle_kind(gpu)] - free, bundle_kind(gpu))
    # Ray Train keeps only its run state in storage_path (our ranks commit to the store themselves)
    with tempfile.TemporaryDirectory(prefix="alignflow-raytrain-") as run_state:
        trainer = TorchTrainer(
            _rank_main, train_loop_config={"main": main, "argv": argv, "cwd": os.getcwd()},
            scaling_config=ScalingConfig(num_workers=n, use_gpu=gpu, resources_per_worker=bundle,
                                         placement_strategy=cfg.placement_strategy,
                                         accelerator_type=cfg.accelerator_type or None),
            # a failed rank fails the run: the stage's retry resumes from the last committed checkpoint
            run_config=RunConfig(name=name, storage_path=run_state, failure_config=FailureConfig(max_failures=0),
                                 # a rank's print() goes to the job log once (Ray Train would also log it)
                                 worker_runtime_env={"env_vars": {"RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}}))
        try:
            trainer.fit()
        except Exception as e:
            user = _user_error(e)
            if user is not None:
                raise user from None
            raise
    return {}
