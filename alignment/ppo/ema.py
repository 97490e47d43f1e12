"""--enable_ema: an exponential moving average of the actor's weights (OpenRLHF's --enable_ema, --ema_beta),
updated after every optimizer step, ema ← β·ema + (1 − β)·θ, kept in fp32 on each rank's CPU, saved in
every checkpoint (so a resumed run continues the same average) and committed beside the actor as a
Hugging Face folder, `<save_path>/ema/`. Averaged weights often evaluate better than the last ones.

Every rank holds the whole actor under ZeRO 0–2, so each keeps the same average and rank 0 writes it;
ZeRO-3's partitioned weights are refused with the flag (alignment/config/ppo.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

log = logging.getLogger(__name__)
FILE = "ema.safetensors"  # in the actor's folder of a checkpoint


def _params(module: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """Every parameter under every name: a tied weight (lm_head = embed_tokens) is averaged under both, so the
    saved state dict holds the average everywhere (under one name the other would keep the last weights)."""
    return list(module.named_parameters(remove_duplicate=False))


class EMA:
    def __init__(self, module: torch.nn.Module, beta: float):
        self.beta = beta
        self.shadow = {n: p.detach().float().cpu().clone() for n, p in _params(module)}

    @torch.no_grad()
    def update(self, module: torch.nn.Module) -> None:
        for n, p in _params(module):
            self.shadow[n].mul_(self.beta).add_(p.detach().float().cpu(), alpha=1.0 - self.beta)

    def state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The module's state dict with the averaged weights, in the module's dtypes (buffers as they are)."""
        return {
            k: (self.shadow[k].to(v.dtype) if k in self.shadow else v.detach().cpu())
            for k, v in module.state_dict().items()
        }

    def save(self, role_dir: Path | None) -> None:
        """Into a checkpoint's actor folder (None: this rank writes nothing)."""
        if role_dir is not None:
            role_dir.mkdir(parents=True, exist_ok=True)
            save_file({k: v.contiguous() for k, v in self.shadow.items()}, str(role_dir / FILE))

    def load(self, role_dir: Path, module: torch.nn.Module) -> None:
        """From a checkpoint's verified actor folder; one written without --enable_ema restarts the average."""
        path = role_dir / FILE
        if not path.exists():
            log.warning(
                "--enable_ema: the checkpoint in %s has no EMA; the average restarts from its weights", role_dir
            )
            self.shadow = {n: p.detach().float().cpu().clone() for n, p in _params(module)}
            return
        self.shadow = load_file(str(path))
