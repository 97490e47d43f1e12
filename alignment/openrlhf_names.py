"""OpenRLHF's import names for user files written for OpenRLHF (`--agent_func_path`, `--remote_rm_url f.py`):
`from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor` and
`from openrlhf.utils import extract_boxed_answer, grade_answer` run unchanged.

Where OpenRLHF is installed its own modules are imported and nothing here is used. Where it is not, `install()`
puts an import finder in front that answers `openrlhf`, `openrlhf.utils` and `openrlhf.utils.agent` (and only
those) with alignment/openrlhf_shim/, which re-exports alignflow's classes and functions. The finder knows the
shim by its files, not by import, so the low layers that load user files (rewards, agents) import nothing
above them.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

SHIM = Path(__file__).parent / "openrlhf_shim"
NAMES = {
    "openrlhf": SHIM / "__init__.py",
    "openrlhf.utils": SHIM / "utils" / "__init__.py",
    "openrlhf.utils.agent": SHIM / "utils" / "agent.py",
}


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):  # noqa: ANN001 (importlib's protocol)
        file = NAMES.get(name)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(name, file, submodule_search_locations=_package(name, file))


def _package(name: str, file: Path) -> list[str] | None:
    return [str(file.parent)] if file.name == "__init__.py" else None


def install() -> None:
    """Answer OpenRLHF's module names with alignflow's, unless OpenRLHF itself is installed (idempotent)."""
    if any(isinstance(f, _Finder) for f in sys.meta_path) or importlib.util.find_spec("openrlhf") is not None:
        return
    sys.meta_path.insert(0, _Finder())
