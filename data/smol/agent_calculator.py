"""A tool-use environment for SmolLM2 on the shipped sums (--agent_func_path): the model may reply
`calc: <expression>` (digits, + - * and parentheses) and the environment answers `result: <value>` in the next
user turn; a reply without a call is its answer. Reward 1 for the right number, 0 otherwise; at most four turns.
Written to OpenRLHF's AgentInstance contract (ChatML turns, as SmolLM2-Instruct's template writes them);
the only alignflow-specific line is the import.
"""

import ast
import operator
import re

from alignment.agents import AgentInstanceBase

TURNS = 4
TOOL = (
    "You may use a calculator: reply with `calc: <expression>` and you will get the result. "
    "Give the final answer as the number only."
)
CALL = re.compile(r"calc:\s*([0-9+\-*() ]+)")
NUMBER = re.compile(r"-?\d+")
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def evaluate(expression: str) -> int | None:
    """The value of + - * arithmetic on integers, or None (anything else is not evaluated)."""

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise ValueError(expression)

    try:
        return value(ast.parse(expression.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return None


def user_turn(text: str) -> str:
    return f"\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


class AgentInstance(AgentInstanceBase):
    def __init__(self, *args, **kwargs):
        self.turn = 0

    async def reset(self, states, **kwargs):
        # the tool's description goes into the user's message, before the assistant's turn opens
        observation = states["observation"]
        head, sep, tail = observation.rpartition("<|im_end|>")
        return {"observation": f"{head} {TOOL}{sep}{tail}" if sep else observation}

    async def step(self, states, **kwargs):
        self.turn += 1
        action = states["action_text"].split("<|im_end|>")[0]
        call = CALL.search(action)
        if call and self.turn < TURNS:
            result = evaluate(call.group(1))
            feedback = user_turn(f"result: {result}" if result is not None else "the calculator cannot read that")
            return {
                "rewards": 0.0,
                "scores": 0.0,
                "environment_feedback": feedback,
                "done": False,
                "sampling_params": states.get("sampling_params"),
                "extra_logs": {"tool_calls": 1.0},
            }
        found = NUMBER.findall(action)
        right = bool(found) and int(found[-1]) == int(states["label"])
        reward = 1.0 if right and not call else 0.0
        return {
            "rewards": reward,
            "scores": reward,
            "environment_feedback": "",
            "done": True,
            "sampling_params": states.get("sampling_params"),
            "extra_logs": {"tool_calls": float(self.turn - 1)},
        }
