"""The type of a flow's per-stage overrides (`sft={...}`, `ppo={...}`): any flag name of that stage,
checked against the stage's schema when the flow starts.

`use_wandb` is only a switch here. Prefect validates a deployment run's parameters against this
schema when the run is created, so an API key given as `use_wandb` is refused *before* the flow run
exists and never reaches Prefect's database (a check inside the flow would come after Prefect had
stored it). The key itself comes from WANDB_API_KEY in the Ray cluster's environment (`use_wandb=env`).
"""
from __future__ import annotations

from typing import Any, Callable, Literal, Optional, Union

from prefect import Flow
from prefect.utilities.callables import get_call_parameters
from pydantic import BaseModel, ConfigDict, Field

from alignment.config import ConfigError

WandbSwitch = Literal["offline", "true", "1", "env", "false", "0"]
SWITCHES = ("offline", "true", "1", "env", "false", "0")


class StageOverrides(BaseModel):
    """Overrides of one stage's config: any of its flag names, e.g. {"max_steps": 200, "lr": 1e-5}."""

    model_config = ConfigDict(extra="allow")
    use_wandb: Optional[Union[bool, WandbSwitch]] = Field(
        None, description="wandb switch only: true/offline/env (the API key comes from WANDB_API_KEY on the Ray "
                          "cluster, never from a parameter)")


def overrides(value: StageOverrides | dict[str, Any] | None) -> dict[str, Any]:
    """The overrides as a plain dict, with only the keys the user gave."""
    if value is None:
        return {}
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)
    return dict(value)


class CheckedFlow(Flow):
    """A flow whose direct Python call (`asyncio.run(sft_flow(sft={...}))`) validates its parameters
    before Prefect creates the flow run: Prefect itself stores the parameters first and validates
    after, so a key given as `use_wandb` would already be in its database. Deployment runs are
    validated by the Prefect server against the same schema before the run is created."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        given = {k: v for k, v in kwargs.items() if k not in ("return_state", "wait_for")}
        parameters = get_call_parameters(self.fn, args, given)
        for name, value in parameters.items():
            switch = overrides(value).get("use_wandb") if isinstance(value, (dict, BaseModel)) else None
            if switch is not None and str(switch).lower() not in SWITCHES:
                raise ConfigError(f"{name}.use_wandb looks like an API key; keys never go in flow parameters: set "
                                  f"WANDB_API_KEY in the environment of the Ray cluster and pass use_wandb=env")
        self.validate_parameters(parameters)
        return super().__call__(*args, **kwargs)


def checked_flow(**flow_options: Any) -> Callable[[Callable[..., Any]], CheckedFlow]:
    """`@flow(...)` for our flows, as a CheckedFlow."""
    return lambda fn: CheckedFlow(fn=fn, **flow_options)
