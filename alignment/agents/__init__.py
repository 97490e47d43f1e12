"""Multi-turn agent RL (`--agent_func_path FILE.py`): OpenRLHF's AgentInstance contract.

A file written for OpenRLHF runs here after one change, its import line:
    from openrlhf.utils.agent import AgentExecutorBase, AgentInstanceBase
becomes
    from alignment.agents import AgentExecutorBase, AgentInstanceBase
"""

from alignment.agents.contract import AgentError, AgentExecutorBase, AgentInstanceBase
from alignment.agents.executor import MultiTurnAgentExecutor
from alignment.agents.llm import Logprob, RequestOutput, SamplingParams

__all__ = [
    "AgentError",
    "AgentExecutorBase",
    "AgentInstanceBase",
    "MultiTurnAgentExecutor",
    "Logprob",
    "RequestOutput",
    "SamplingParams",
]
