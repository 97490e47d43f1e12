"""Checks a training CLI runs right after its flags parse, before any data or model is read."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from alignment import lease
from alignment.cli import interrupt
from alignment.config.paths import Outputs, within
from alignment.config.ppo import PPOConfig
from alignment.config.stages import StageConfig


def check_outputs(cfg: StageConfig) -> None:
    """The stores the run will write to (--save_path, --ckpt_path, --output_path) answer and their
    buckets exist: one request each, so a wrong bucket fails now, not after the model loaded and
    trained. Their schemes were checked with the flags (alignment.config.groups.check_store_uri).
    Then the leases of the output and of its checkpoint folder (one writer each), and what an interrupt
    reports on (cli/interrupt.py)."""
    from alignment.datasets.sources import check_store
    from alignment.storage import StorageError

    outputs = cfg.outputs()
    for flag, uri in outputs.stores():
        check_store(flag, uri, StorageError)
    check_writable(outputs)
    take_lease(outputs.uri)
    if outputs.ckpt and outputs.checkpoints and not (outputs.uri and within(outputs.ckpt, outputs.uri)):
        take_lease(outputs.ckpt)  # two runs on one --ckpt_path would resume from and overwrite each other's
    interrupt.record(outputs.flag, outputs.uri, outputs.ckpt, outputs.checkpoints)


def check_writable(outputs: Outputs) -> None:
    """The local folders the run will write (the output's, and --ckpt_path's when it checkpoints) accept files:
    a read-only mount is one line now, not a traceback from the lease or from the first checkpoint."""
    from alignment.cli.disk import check_writable as probe

    probe(outputs.flag, outputs.uri)
    if outputs.checkpoints:
        probe("--ckpt_path", outputs.ckpt)


def take_lease(output: str | None) -> None:
    """An output's lease (alignment/lease.py), taken by the process that owns the run: the driver or
    in-process trainer, or rank 0 under torchrun/deepspeed; ranks started by a driver share its lease.
    Held until the CLI's main returns (run_main releases it) or the process ends."""
    if not output or os.environ.get("RANK", "0") != "0":
        return
    lease.Lease(output, f"alignment.cli.{Path(sys.argv[0]).stem}").acquire()


def check_reward_file(cfg: PPOConfig) -> None:
    """A --remote_rm_url .py file, before any group is placed or model loaded: its reward_func takes
    (queries, prompts, labels) and answers two samples — the first two prompts of --prompt_data, with empty
    responses — with two rewards (or the dict of rewards/scores/extra_logs). A wrong signature, a wrong
    length or an exception is one line naming the file, not a failure after the groups started."""
    from alignment.datasets.sources import read_rows
    from alignment.rewards.reward_func import RewardError, load_reward_func, parse_output

    if cfg.train.agent_func_path:
        return check_agent_file(cfg)
    path = cfg.reward.remote_url
    if not path or not path.endswith(".py") or not cfg.data.prompt_dataset:
        return
    fn = load_reward_func(path)
    rows = read_rows(cfg.data.prompt_dataset.split(",")[0], cfg.data.prompt_split, "--prompt_data")[:2]
    prompts = [_text(r.get(cfg.data.input_key)) for r in rows]
    labels = [r.get(cfg.data.label_key) if cfg.data.label_key else None for r in rows]
    try:
        out = fn(list(prompts), list(prompts), labels)
    except Exception as e:  # the user's code: whatever it raises is the one line
        raise RewardError(
            f"{path}: reward_func raised {type(e).__name__}: {e} when called on the first "
            f"{len(rows)} prompts of --prompt_data with empty responses; it must score any response"
        ) from None
    parse_output(out, len(rows), path)


def check_agent_file(cfg: PPOConfig) -> None:
    """An --agent_func_path file, before any group is placed: it defines AgentInstance (and AgentExecutor, if
    any, of the right base), and one episode of it — reset on the first prompt of --prompt_data, then a step
    with an empty model turn — answers in the contract's shape within --agent_step_timeout."""

    from alignment.agents.contract import AgentError, StepResult, observation
    from alignment.agents.executor import make_instance
    from alignment.agents.llm import SamplingParams
    from alignment.agents.runner import load_agent_file
    from alignment.datasets.sources import read_rows

    path = cfg.train.agent_func_path
    instance_cls, _ = load_agent_file(path)
    rows = (
        read_rows(cfg.data.prompt_dataset.split(",")[0], cfg.data.prompt_split, "--prompt_data")[:1]
        if cfg.data.prompt_dataset
        else []
    )
    if not rows:
        return
    prompt, label = (
        _text(rows[0].get(cfg.data.input_key)),
        rows[0].get(cfg.data.label_key) if cfg.data.label_key else None,
    )

    async def one_step() -> None:
        env = await make_instance(instance_cls)
        text = observation(await env.reset({"observation": prompt, "label": label}), f"{path} (start-up check)")
        states = {
            "observation_text": text,
            "action_text": "",
            "label": label,
            "sampling_params": SamplingParams(cfg.rollout.max_new_tokens, cfg.rollout.temperature, cfg.rollout.top_p),
        }
        StepResult.of(
            await asyncio.wait_for(env.step(states), cfg.train.agent_step_timeout), f"{path} (start-up check)"
        )

    try:
        asyncio.run(one_step())
    except AgentError:
        raise
    except asyncio.TimeoutError:
        raise AgentError(
            f"{path}: step did not return within --agent_step_timeout {cfg.train.agent_step_timeout:g} s at "
            f"the start-up check (first prompt, empty turn)"
        ) from None
    except Exception as e:  # the user's code: whatever it raises is the one line
        raise AgentError(
            f"{path}: {type(e).__name__}: {e} at the start-up check (reset on the first prompt of "
            f"--prompt_data, then step with an empty turn); an environment must answer any turn"
        ) from None


def _text(value: object) -> str:
    """A prompt as text: a string, or a chat's messages joined."""
    if isinstance(value, list):
        return "\n".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in value)
    return "" if value is None else str(value)
