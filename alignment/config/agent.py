"""Multi-turn agent RL flags (`--agent_func_path`, OpenRLHF's name; the turn limit and step timeout are alignflow's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from alignment.config.base import opt, require


@dataclass(frozen=True)
class Agent:
    """`train` settings; AgentConfig checks them."""

    agent_func_path: Optional[str] = opt(
        None,
        "A .py file defining AgentInstance (OpenRLHF's contract: async reset/step): "
        "each sample is a multi-turn episode whose environment answers every model "
        "turn and gives the reward (docs/agents.md)",
        path="reward",
        dotted="train.agent_func_path",
    )
    agent_max_turns: int = opt(16, "With --agent_func_path: most model turns per episode")
    agent_step_timeout: float = opt(
        60.0,
        "With --agent_func_path: seconds a step() may take before the run stops with "
        "an error naming the file and episode",
        identity=False,
    )
    agent_batch_linger_ms: Optional[float] = opt(
        None,
        "With --agent_func_path: stream episodes instead of lock-step turns. Unset, a generation batch goes when "
        "every live episode waits on the model (reproducible, but each turn waits for the slowest environment "
        "step); set, it also goes once its first request has waited this long, and is generated while the "
        "environments' steps go on (a slow step holds only its own episode; sampling then depends on timing)",
    )


class AgentConfig:
    """The checks of `Agent` (`train`): a stage's `validate()` runs them, before anything loads."""

    def check_agent(self) -> None:
        linger = self.train.agent_batch_linger_ms
        require(
            linger is None or (bool(self.train.agent_func_path) and 0 <= linger < 600_000),
            f"--agent_batch_linger_ms {linger}: milliseconds in [0, 600000) (e.g. 50), with --agent_func_path",
        )
        require(self.train.agent_max_turns >= 1, f"--agent_max_turns {self.train.agent_max_turns}: must be >= 1")
        require(self.train.agent_step_timeout > 0, f"--agent_step_timeout {self.train.agent_step_timeout}: must be > 0")
        if not self.train.agent_func_path:
            return
        require(
            not (self.reward.model_name_or_path or self.reward.remote_url),  # type: ignore[attr-defined]  (RewardSourceConfig)
            "--agent_func_path: the environment gives the rewards; drop --reward_pretrain / --remote_rm_url "
            "(or score inside the agent's step)",
        )
        require(
            not self.reward.overlong_buffer_len,  # type: ignore[attr-defined]  (AlgorithmConfig)
            "--overlong_buffer_len penalises one response's length against --generate_max_len; an agent episode "
            "has several turns: drop it, or shape length inside the agent's step",
        )
