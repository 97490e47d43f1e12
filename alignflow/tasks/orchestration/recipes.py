"""Recipes: a folder of stage YAMLs (the CLI's --config format), one file per stage parameter of a
flow (`sft.yaml`, `rm.yaml`, `ppo.yaml`, `dpo.yaml`, `generate.yaml`, ...). A flow run names one
(`recipe="tiny"`: `deployments/recipes/tiny/`; or the path of the user's own folder); with no recipe
a stage starts from its schema's defaults, so a run with the user's own model and data inherits no
value of a shipped recipe. A stage's config is then: schema defaults < the recipe's file < the run's
overrides < upstream outputs.

The merged config of every stage is validated before a cluster starts (alignflow/tasks/orchestration/pipeline.py) and
published as one markdown artifact (`<run>-configs`), so the Prefect UI shows exactly what each
stage will run with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alignflow.tasks.orchestration.stage_spec import shipped
from alignment.config import ConfigError

RECIPES = shipped("deployments", "recipes")  # package data of alignflow.deployments


@dataclass(frozen=True)
class Recipe:
    name: str | None  # as the run gave it; None: no recipe
    folder: Path | None

    def file(self, role: str) -> str | None:
        """The recipe's YAML for a flow's stage parameter `role` (None when it has none)."""
        path = self.folder / f"{role}.yaml" if self.folder else None
        return str(path) if path and path.is_file() else None

    def has(self, role: str) -> bool:
        return self.file(role) is not None


def shipped_recipes() -> list[str]:
    return sorted(p.name for p in RECIPES.iterdir() if p.is_dir())


def load_recipe(recipe: str | None) -> Recipe:
    """A shipped recipe's name, a folder path, or None (no recipe)."""
    if not recipe:
        return Recipe(None, None)
    folder = Path(recipe).expanduser()
    if not folder.is_dir():
        folder = RECIPES / recipe
    if not folder.is_dir() or not any(folder.glob("*.yaml")):
        raise ConfigError(
            f"recipe {recipe!r}: neither a shipped recipe ({', '.join(shipped_recipes())}) nor a folder of stage "
            f"YAML files; name one of those, give your folder's path, or pass no recipe"
        )
    return Recipe(recipe, folder.resolve())
