"""The benchmarks' scripts imported from their files (benchmarks/ is no package), as their tests call them."""

from __future__ import annotations

import importlib.util
import sys

from tests.conftest import REPO


def load_benchmark():
    spec = importlib.util.spec_from_file_location("learning_benchmark", REPO / "benchmarks" / "learning.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module
