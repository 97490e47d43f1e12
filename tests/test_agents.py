"""Multi-turn agent RL (--agent_func_path, alignment/agents): episodes on the real tiny model, the loss mask
of the environment's tokens, the PPO CLIs on both backends, and the errors a user's file can cause."""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

from tests.agent_files import CUSTOM_EXECUTOR, FEEDBACK, NEVER_DONE, OPENRLHF_STYLE, SCRIPTED, run_episodes
from tests.conftest import REPO, metric_rows, run_module
from tests.ppo_cli import GROUP_SMALL, PROMPTS


def test_running_reward_moments_equal_the_whole_history():
    """--normalize_reward without an RM: batch k is normalised by the mean/std of batches 1..k, exactly."""
    from alignment.losses.reward_norm import RunningMoments

    batches = [torch.tensor([0.0, 1.0, 1.0, 0.0]), torch.tensor([1.0, 1.0, 1.0, 0.5]), torch.tensor([3.0, -1.0])]
    moments, seen = RunningMoments(), []
    for b in batches:
        seen.append(b)
        got = moments.normalize(b)
        everything = torch.cat(seen).double()
        expected = (b.double() - everything.mean()) / (everything.std() + 1e-8)
        assert torch.allclose(got.double(), expected, atol=1e-6)
    assert RunningMoments(*moments.state()) == moments  # what a checkpoint keeps restores it


def test_an_agent_file_may_replace_how_an_episode_runs(tiny_base, tmp_path):
    """A file with only an AgentExecutor (OpenRLHF v0.11's contract, its import line) runs the episodes: its
    tokens, ranges, reward and scores are what PPO gets."""
    (tmp_path / "custom.py").write_text(CUSTOM_EXECUTOR)
    got = run_episodes(tiny_base, str(tmp_path / "custom.py"))
    assert got.scored.rewards.tolist() == [0.25, 0.25] and got.scored.scores.tolist() == [0.5, 0.5]
    assert got.scored.logs == {"custom": 1.0} and all(m == [1] * len(m) for m in got.rollout.loss_mask)
    assert all(0 < len(r) <= 6 for r in got.rollout.response_ids)


def test_an_executor_built_as_openrlhf_builds_it_keeps_the_turn_limit_and_images_are_refused(tiny_base, tmp_path):
    """`super().__init__(AgentInstance)` (all of OpenRLHF's multi-turn examples) still stops at --agent_max_turns
    (not the executor's default of 16); an environment that answers a text-only policy with images is one line,
    never dropped."""
    from alignment.agents.contract import AgentError

    (tmp_path / "loop.py").write_text(NEVER_DONE.replace("IMAGES", '"extra_logs": {}'))
    got = run_episodes(tiny_base, str(tmp_path / "loop.py"), max_turns=2, n=1)
    assert got.metrics["agent/turns"] == 2
    (tmp_path / "pictures.py").write_text(NEVER_DONE.replace("IMAGES", '"environment_images": ["a.png"]'))
    with pytest.raises(AgentError, match="the environment returned images, but the policy is a text-only model"):
        run_episodes(tiny_base, str(tmp_path / "pictures.py"), n=1)


def test_a_math_reward_file_written_for_openrlhf_runs_unchanged(tmp_path):
    """`from openrlhf.utils import extract_boxed_answer, grade_answer` (OpenRLHF's math reward pattern) loads and
    grades: equal answers in other forms count, a wrong or missing box does not."""
    from alignment.rewards.reward_func import load_reward_func

    (tmp_path / "math_reward.py").write_text(
        textwrap.dedent("""
        import torch
        from openrlhf.utils import extract_boxed_answer, grade_answer

        def reward_func(queries, prompts, labels, **kwargs):
            pairs = zip(queries, prompts, labels)
            got = [float(grade_answer(extract_boxed_answer(q[len(p) :]), y)) for q, p, y in pairs]
            return {"rewards": torch.tensor(got), "scores": torch.tensor(got), "extra_logs": {}}
    """)
    )
    fn = load_reward_func(str(tmp_path / "math_reward.py"))
    responses = ["so \\boxed{\\frac{1}{2}}", "\\boxed{0.5}", "\\boxed{3}", "0.5", "\\boxed{(1, 2)}"]
    labels = ["0.5", "\\frac12", "4", "0.5", "(1,2)"]
    out = fn(["Q:" + r for r in responses], ["Q:"] * 5, labels)
    assert out["rewards"].tolist() == [1.0, 1.0, 0.0, 0.0, 1.0]


def test_shipped_smollm2_calculator_environment():
    """data/smol/agent_calculator.py: the tool's description joins the user's message, a `calc:` reply
    gets the result as the next user turn, a plain number ends the episode with reward 1 if it is right; only
    + - * on integers is evaluated."""
    import asyncio

    from alignment.agents.executor import make_instance
    from alignment.agents.runner import load_agent_file

    cls, executor = load_agent_file(str(REPO / "data/smol/agent_calculator.py"))
    prompt = "<|im_start|>user\nWhat is 25 + 73? Answer with the number only.<|im_end|>\n<|im_start|>assistant\n"

    async def episode(actions: list[str]) -> list[dict]:
        env = await make_instance(cls)
        first = await env.reset({"observation": prompt, "label": "98"})
        assert "calc: <expression>" in first["observation"] and first["observation"].endswith("<|im_start|>assistant\n")
        return [await env.step({"observation_text": "", "action_text": a, "label": "98"}) for a in actions]

    tool, answer = asyncio.run(episode(["calc: 25 + 73<|im_end|>", "98<|im_end|>"]))
    assert "result: 98" in tool["environment_feedback"] and not tool["done"] and tool["rewards"] == 0.0
    assert answer["done"] and answer["rewards"] == 1.0 and answer["extra_logs"]["tool_calls"] == 1.0
    assert asyncio.run(episode(["97"]))[0]["rewards"] == 0.0
    assert "cannot read" in asyncio.run(episode(["calc: __import__('os')"]))[0]["environment_feedback"]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--agent_func_path", "a.py", "--remote_rm_url", "r.py"], "the environment gives the rewards"),
        (["--agent_func_path", "a.py", "--overlong_buffer_len", "4"], "--overlong_buffer_len penalises one response"),
        (["--remote_rm_url", "r.py", "--vllm_enable_sleep"], "there are none (--vllm_num_engines 0)"),
        (
            ["--remote_rm_url", "r.py", "--vllm_num_engines", "1", "--async_train", "--vllm_enable_sleep"],
            "no idle phase to sleep through",
        ),
        (["--remote_rm_url", "r.py", "--deepspeed_enable_sleep", "--zero_stage", "0"], "give --zero_stage 1, 2 or 3"),
        (
            ["--remote_rm_url", "r.py", "--deepspeed_enable_sleep", "--zero_stage", "2", "--adam_offload"],
            "already live in CPU memory",
        ),
        (["--agent_func_path", "a.py", "--agent_max_turns", "0"], "--agent_max_turns 0: must be >= 1"),
        (
            ["--agent_func_path", "a.py", "--async_train", "--partial_rollout_enable"],
            "on the HF engine an agent's episodes already go on across updates",
        ),
    ],
)
def test_flags_that_cannot_apply_are_one_line(extra, needle):
    from alignment.config import ConfigError, PPOConfig, parse_args

    with pytest.raises(ConfigError, match=re.escape(needle)):
        parse_args(PPOConfig, ["--pretrain", "m", "--prompt_data", "p.jsonl", *extra])


def _segments(mask: list[int]) -> list[tuple[int, int, int]]:
    """(value, start, end) runs of a 0/1 mask."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((mask[start], start, i))
            start = i
    return out


def test_three_turn_episode_masks_every_feedback_token_and_packs_exactly(tiny_base, tmp_path):
    """Real episodes (the tiny model on the HF engine, a scripted 3-turn environment): each response is
    turn, feedback, turn, feedback, turn; the loss mask is 1 on exactly the model's tokens and 0 on exactly
    the feedback's (checked token by token against the feedback's own tokenization); the batch's action mask
    is that mask; and the log-probs of the packed episode rows equal the padded rows' within 1e-5."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from alignment.agents.runner import AgentRunner, AgentSettings
    from alignment.datasets.prompts import PromptSample
    from alignment.ppo.batch import action_logprobs, rollout_to_batch
    from alignment.ppo.packed import Packing
    from alignment.rollout.hf_engine import HFEngine

    (tmp_path / "scripted.py").write_text(SCRIPTED)
    tok = AutoTokenizer.from_pretrained(tiny_base)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, attn_implementation="sdpa").eval()
    engine = HFEngine(model, tok.eos_token_id, tok.pad_token_id)
    texts = [
        tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in ("What is 2 + 3?", "What is 40 - 7?")
    ]
    prompts = [PromptSample(t, tok(t, add_special_tokens=False)["input_ids"], None) for t in texts]
    runner = AgentRunner(AgentSettings(str(tmp_path / "scripted.py"), 5, 10.0, 200, 6), tok)
    got = runner.run(prompts, 2, engine.generate, seed=1, temperature=1.0, top_p=1.0, logprobs=False)
    feedback_ids = [tok(f, add_special_tokens=False)["input_ids"] for f in FEEDBACK]
    rollout = got.rollout
    assert len(rollout) == 4 and rollout.prompt_index == [0, 0, 1, 1] and got.metrics["agent/turns"] == 3
    assert got.scored.rewards.tolist() == [1.0] * 4
    for i in range(4):
        assert rollout.prompt_ids[i] == prompts[rollout.prompt_index[i]].ids
        response, mask = rollout.response_ids[i], rollout.loss_mask[i]
        runs = _segments(mask)
        assert [v for v, _, _ in runs] == [1, 0, 1, 0, 1], runs
        for (v, a, b), k in zip(runs[1::2], range(2)):  # every 0 token is the feedback, and all of it
            assert response[a:b] == feedback_ids[k]
        assert all(b - a <= 6 for v, a, b in runs if v == 1)  # each model turn within its token budget
    batch = rollout_to_batch(rollout, tok.pad_token_id)
    for i in range(4):
        p, r = len(rollout.prompt_ids[i]), len(rollout.response_ids[i])
        assert batch.action_mask[i, p - 1 : p - 1 + r].tolist() == [float(m) for m in rollout.loss_mask[i]]
        assert batch.action_mask[i].sum() == sum(rollout.loss_mask[i])
    assert batch.prompt_lengths == [len(p) for p in rollout.prompt_ids]
    with torch.no_grad():
        padded = action_logprobs(model, batch)
        packed = action_logprobs(model, batch, Packing(torch.bool))
    assert (padded - packed).abs().max().item() < 1e-5


@pytest.mark.integration
def test_openrlhf_style_agent_file_trains_with_packing_and_logs(tiny_sft, tmp_path):
    """train_ppo (in process, HF engine) with an agent file written to OpenRLHF's contract: two iterations of
    group_norm on the final turn's reward, packed, with DAPO's dynamic filtering on the episodes' scores (refills
    are episodes too), commit a plain HF model; turns and the file's extra_logs are in the metrics. --async_train:
    the episodes come from a pool holding the next iteration's too (alignment/agents/pool.py), never past the
    staleness bound."""
    from transformers import AutoModelForCausalLM

    agent = tmp_path / "agent_func.py"
    agent.write_text(OPENRLHF_STYLE)
    out = tmp_path / "agent"
    run_module(
        "alignment.cli.train_ppo",
        [
            "--pretrain",
            str(tiny_sft),
            "--save_path",
            str(out),
            *PROMPTS,
            *GROUP_SMALL,
            "--agent_func_path",
            str(agent),
            "--packing_samples",
            "--dynamic_filtering",
            "--dynamic_filtering_reward_range",
            "0",
            "1",
            "--async_train",
        ],
    )
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["train/agent/groups_in_flight"] > 0  # the second iteration's groups, ahead
    for r in rows:
        assert r["train/staleness/max"] <= 1  # --async_queue_size 1
        # turns: the first draw's episodes; the file's extra_logs: the episodes kept after filtering
        assert 1 <= r["train/agent/turns"] <= 2 and 1 <= r["train/reward/turn_reached"] <= 2
        assert 0 < r["train/reward"] < 1  # only groups with mixed outcomes are trained on
        assert r["train/dynamic_filtering/prompts_generated"] >= 8
    AutoModelForCausalLM.from_pretrained(out)


@pytest.mark.integration
@pytest.mark.parametrize("fault", ["raises", "hangs"])
def test_a_failing_or_hanging_step_is_one_line_naming_the_file(tiny_sft, tmp_path, fault):
    """A step that raises (or sleeps past --agent_step_timeout) at turn 2 — after the start-up check's
    first step passed — stops the run with exit 2 and one line naming the file and the episode."""
    body = "raise ValueError('the environment broke')" if fault == "raises" else "await asyncio.sleep(600)"
    agent = tmp_path / "broken_agent.py"
    agent.write_text(
        textwrap.dedent(f"""
        import asyncio
        from alignment.agents import AgentInstanceBase

        class AgentInstance(AgentInstanceBase):
            turn = 0

            async def step(self, states, **kwargs):
                self.turn += 1
                if self.turn == 2:
                    {body}
                return {{"rewards": 0.0, "done": False, "environment_feedback": "\\n<|user|>\\nagain<|end|>\\n"}}
    """)
    )
    proc = run_module(
        "alignment.cli.train_ppo",
        [
            "--pretrain",
            str(tiny_sft),
            "--save_path",
            str(tmp_path / "out"),
            *PROMPTS,
            *GROUP_SMALL,
            "--agent_func_path",
            str(agent),
            "--agent_step_timeout",
            "2",
        ],
        check=False,
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-3000:]
    assert str(agent) in errors[0] and "episode" in errors[0], errors
    assert (
        "ValueError: the environment broke" in errors[0]
        if fault == "raises"
        else "did not return within --agent_step_timeout 2 s" in errors[0]
    ), errors
    assert "Traceback" not in proc.stderr and not (tmp_path / "out" / "MANIFEST.json").exists()
