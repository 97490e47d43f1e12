"""`openrlhf.utils.agent` for agent files: alignflow's classes under OpenRLHF's names (alignment/agents)."""

from alignment.agents import AgentExecutorBase, AgentInstanceBase, MultiTurnAgentExecutor

__all__ = ["AgentExecutorBase", "AgentInstanceBase", "MultiTurnAgentExecutor"]
