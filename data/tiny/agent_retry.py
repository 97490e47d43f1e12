"""A multi-turn environment for the arithmetic task (--agent_func_path): a wrong answer gets a hint — the right
answer is larger or smaller — and another try, up to three tries. Reward 1 for a right answer at any try,
0 otherwise; the episode's score (for dynamic filtering) is the same. Written to OpenRLHF's AgentInstance
contract; the only alignflow-specific line is the import.
"""

from alignment.agents import AgentInstanceBase
from alignment.tiny_world.reward import extract_answer

TRIES = 3


class AgentInstance(AgentInstanceBase):
    def __init__(self, *args, **kwargs):
        self.tries = 0

    async def reset(self, states, **kwargs):
        return {"observation": states["observation"]}

    async def step(self, states, **kwargs):
        self.tries += 1
        answer, label = extract_answer(states["action_text"]), int(states["label"])
        right = answer == label
        done = right or self.tries >= TRIES
        if done:
            feedback = ""
        elif answer is None:
            feedback = "\n<|user|>\nGive the answer as a number.<|end|>\n<|assistant|>\n"
        else:
            feedback = (
                f"\n<|user|>\nNo, {answer} is too {'small' if answer < label else 'large'}. "
                f"Try again.<|end|>\n<|assistant|>\n"
            )
        reward = 1.0 if right else 0.0
        return {
            "rewards": reward,
            "scores": reward,
            "environment_feedback": feedback,
            "done": done,
            "sampling_params": states.get("sampling_params"),
            "extra_logs": {"tries": float(self.tries), "first_try_right": float(right and self.tries == 1)},
        }
