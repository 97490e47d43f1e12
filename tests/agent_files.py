"""Agent files as users write them, for the agent tests: a scripted environment, one written for OpenRLHF, v0.11's
executor-only contract, and one that never says done; and a few episodes of one on a real model."""

from __future__ import annotations

import textwrap

FEEDBACK = [
    "\n<|user|>\nnot yet, try once more<|end|>\n<|assistant|>\n",
    "\n<|user|>\nlast try<|end|>\n<|assistant|>\n",
]

SCRIPTED = textwrap.dedent(f"""
    from alignment.agents import AgentInstanceBase

    FEEDBACK = {FEEDBACK!r}

    class AgentInstance(AgentInstanceBase):
        def __init__(self, *args, **kwargs):
            self.turn = 0

        async def reset(self, states, **kwargs):
            return {{"observation": states["observation"]}}

        async def step(self, states, **kwargs):
            self.turn += 1
            done = self.turn == 3
            return {{"rewards": float(done), "scores": float(done), "done": done,
                    "environment_feedback": "" if done else FEEDBACK[self.turn - 1],
                    "sampling_params": states["sampling_params"], "extra_logs": {{}}}}
""")

# An agent file as OpenRLHF v0.11's examples write one, OpenRLHF's import line included (answered by
# alignment/openrlhf_names.py where OpenRLHF is not installed): tensors for rewards, scores and logs, an async
# __init__ as the older examples declare it, and the executor built as `super().__init__(AgentInstance)`.
OPENRLHF_STYLE = textwrap.dedent("""
    import torch
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor
    from alignment.tiny_world.reward import extract_answer


    class AgentInstance(AgentInstanceBase):
        async def __init__(self, *args, **kwargs):      # OpenRLHF's examples declare it async
            self.step_idx = 0

        async def reset(self, states: dict, **kwargs):
            return {"observation": states["observation"]}

        async def step(self, states: dict, **kwargs):
            self.step_idx += 1
            right = extract_answer(states["action_text"]) == int(states["label"])
            done = right or self.step_idx >= 2
            reward = torch.tensor(float(right)) if done else torch.tensor(0.0)   # the final turn's reward
            feedback = "" if done else "\\n<|user|>\\nWrong. Try again.<|end|>\\n<|assistant|>\\n"
            return {"rewards": reward, "scores": reward, "environment_feedback": feedback, "done": done,
                    "sampling_params": states.get("sampling_params", None),
                    "extra_logs": {"turn_reached": torch.tensor([float(self.step_idx)])}}


    class AgentExecutor(MultiTurnAgentExecutor):
        def __init__(self):
            super().__init__(AgentInstance)
""")

# v0.11's executor-only contract: no AgentInstance, execute(..., images=None), generate(..., multi_modal_data=None)
CUSTOM_EXECUTOR = textwrap.dedent("""
    from openrlhf.utils.agent import AgentExecutorBase

    class AgentExecutor(AgentExecutorBase):
        async def execute(self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images=None):
            ids = hf_tokenizer(prompt, add_special_tokens=False)["input_ids"]
            out = (await llm_engine.generate(ids, sampling_params, multi_modal_data=None)).outputs[0]
            end = len(ids) + len(out.token_ids)
            return {"observation_tokens": ids + list(out.token_ids), "action_ranges": [(len(ids), end)],
                    "reward": 0.25, "scores": 0.5, "extra_logs": {"custom": 1.0}, "rollout_log_probs": None}
""")

NEVER_DONE = textwrap.dedent("""
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

    class AgentInstance(AgentInstanceBase):
        async def step(self, states, **kwargs):
            return {"rewards": 0.0, "done": False, "environment_feedback": "\\n<|user|>\\nagain<|end|>\\n",
                    IMAGES}

    class AgentExecutor(MultiTurnAgentExecutor):
        def __init__(self):
            super().__init__(AgentInstance)
""")


def run_episodes(model_dir, path: str, max_turns: int = 5, n: int = 2, linger_s: float | None = None):
    """`n` episodes of the agent file at `path` from one prompt ("What is 2 + 3?"), the model at `model_dir` on the
    HF engine: the runner's result (rollout, scores, metrics)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from alignment.agents.runner import AgentRunner, AgentSettings
    from alignment.datasets.prompts import PromptSample
    from alignment.rollout.hf_engine import HFEngine

    tok = AutoTokenizer.from_pretrained(model_dir)
    engine = HFEngine(AutoModelForCausalLM.from_pretrained(model_dir).eval(), tok.eos_token_id, tok.pad_token_id)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], tokenize=False, add_generation_prompt=True
    )
    return AgentRunner(AgentSettings(path, max_turns, 10.0, 200, 6, linger_s=linger_s), tok).run(
        [PromptSample(text, tok(text, add_special_tokens=False)["input_ids"], "5")],
        n,
        engine.generate,
        seed=1,
        temperature=1.0,
        top_p=1.0,
        logprobs=False,
    )
