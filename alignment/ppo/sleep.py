"""--deepspeed_enable_sleep on a training rank: the ZeRO optimizer's states (fp32 master weights, Adam moments,
gradient buffers) live in CPU memory between training passes and come back for the next pass, a checkpoint
save or load (DeepSpeed's offload_states / reload_states), so generation and the other groups' passes have
the accelerator memory they held. The model's own weights stay where they are: they score and generate.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

log = logging.getLogger(__name__)


class OptimizerSleep:
    def __init__(self, engine: DeepSpeedEngine, enabled: bool, device_type: str, role: str):
        self.engine, self.asleep = engine, False
        self.enabled = enabled and device_type != "cpu"
        if enabled and not self.enabled:
            log.info(
                "--deepspeed_enable_sleep: %s's optimizer states are in host memory already (CPU cluster); "
                "nothing to move",
                role,
            )

    @contextmanager
    def awake(self) -> Iterator[None]:
        """The states on the device for the block, back in CPU memory after it."""
        if self.asleep:
            self.engine.reload_states()
            self.asleep = False
        yield
        if self.enabled:
            self.engine.offload_states()
            self.asleep = True
