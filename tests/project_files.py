"""A temp copy of the project files that render and lock read and write: tests never modify the real ones."""

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def copy_tree(dest: Path) -> Path:
    """Copy stacks.toml, locks/, environments/ and the top-level env files into dest; return its stacks.toml."""
    shutil.copy(ROOT / "stacks.toml", dest / "stacks.toml")
    shutil.copytree(ROOT / "locks", dest / "locks")
    shutil.copytree(ROOT / "environments", dest / "environments")
    for path in ROOT.glob("environment*.yml"):
        shutil.copy(path, dest / path.name)
    return dest / "stacks.toml"
