"""Facts about a Python environment, gathered by running a small stdlib-only script in its interpreter.

The doctor itself need not share the environment it examines: torch is located, never imported.
The distributions are those on the interpreter's sys.path, so a `--system-site-packages` venv's include
its base's; where a name is installed in several sys.path entries, the first one is what imports and the
later ones are listed apart as shadowed.
"""

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from verlenv.errors import UserError

# Run by path in the env's own python: the facts gathered there, as JSON.
SCRIPT = Path(__file__).with_name("env_programs") / "env_facts.py"


@dataclass
class Dist:
    name: str
    version: str
    requires: list[str]
    location: str
    files: list[str] = field(default_factory=list)


@dataclass
class EnvFacts:
    executable: str
    prefix: str
    base_prefix: str
    version: str
    site_packages: list[str]
    torch: dict | None
    # What imports: one folder per name (two installs there if one went over the other).
    distributions: list[Dist]
    markers: dict[str, str]
    # Installs of the same names in later sys.path entries, e.g. a base's under a venv's: never imported.
    shadowed: list[Dist] = field(default_factory=list)
    glibc: str | None = None  # the node's C library release, as this interpreter sees it ("2.36"; None: not glibc)
    libstdcxx: str | None = None  # the libstdc++.so.6 file this interpreter loads

    def dist(self, name: str) -> Dist | None:
        want = _canon(name)
        return next((d for d in self.distributions if _canon(d.name) == want), None)


def _canon(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def gather(python: str | Path, timeout: float = 120) -> EnvFacts:
    """Facts of the environment of interpreter `python`."""
    try:
        proc = subprocess.run([str(python), str(SCRIPT)], capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise UserError(f"--python {python}: no such interpreter") from None
    except PermissionError:
        raise UserError(f"--python {python}: not executable") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"--python {python}: gave no answer within {timeout:.0f} s") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"--python {python}: could not inspect this interpreter ({last})")
    data = json.loads(proc.stdout)
    data["distributions"] = [Dist(**d) for d in data["distributions"]]
    data["shadowed"] = [Dist(**d) for d in data["shadowed"]]
    return EnvFacts(**data)
