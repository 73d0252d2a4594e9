"""The options of one `verlenv verify` run, each written once: its flag, default and help. The command line adds them
to its parser and reads them back (`from_args`); a report records them as given (`to_argv`); `verify --ray` carries
them whole to every node (`to_json`, `from_json`), so a node checks exactly what one machine would."""

import dataclasses
import os
from dataclasses import dataclass, field, fields

from verlenv.catalog import gpus
from verlenv.catalog.stacks import STACK_HELP, VARIANT_HELP
from verlenv.errors import UserError

MODES = ("fast", "thorough")
ALLREDUCE = ("nccl", "gloo", "off")


def _opt(default, help: str, *, flag: str | None = None, group: str | None = None, metavar: str | None = None,
         choices: tuple | None = None, repeat: bool = False, nargs: str | None = None, const=None, kind=None,
         cluster_only: bool = False, local_only: bool = False):
    return field(default=default, metadata={"help": help, "flag": flag, "group": group, "metavar": metavar,
                                            "choices": choices, "repeat": repeat, "nargs": nargs, "const": const,
                                            "kind": kind, "cluster_only": cluster_only, "local_only": local_only})


@dataclass(frozen=True)
class VerifyOptions:
    gpu: str = _opt("auto", f"GPU profile ({', '.join(gpus.profiles())}; data/gpus.toml); auto = the visible GPU, or "
                            "the static checks only when there is none", metavar="auto|PROFILE")
    force: bool = _opt(False, "use --gpu's profile even when that GPU is not the one present")
    stack: str | None = _opt(None, STACK_HELP)
    variant: str | None = _opt(None, VARIANT_HELP)
    python: str | None = _opt(None, "interpreter of the env to verify (default: the active env, else "
                                    ".venv-<stack>-<variant>)")
    lock: str | None = _opt(None, "lock to compare with (default: locks/<stack>-<variant>.<platform>.txt)",
                            metavar="PATH")
    no_lock: bool = _opt(False, "skip the lock comparison (an env not installed from the lock)")
    skip_package: tuple[str, ...] = _opt((), "record NAME's checks as skipped, e.g. a package this machine does not "
                                             "install (repeatable)", metavar="NAME", repeat=True)
    only: str | None = _opt(None, "run only NAME's checks", metavar="NAME")
    timeout: float = _opt(150.0, "seconds per kernel check script (default 150)", kind=float)
    kernels_dir: str | None = _opt(None, "directory of kernel check scripts (default: the packaged ones)",
                                   metavar="DIR", local_only=True)
    report: str | None = _opt(None, "JSON report path (default: reports/verify-<stack>-<variant>-<gpu>-<time>.json)",
                              metavar="PATH")
    markdown: str | None = _opt(None, "also write a markdown summary of the report here", metavar="PATH",
                                local_only=True)
    thorough: bool = _opt(False, "the production path: verl's and the rollout's defaults (CUDA graphs, "
                                 "torch.compile), every check and family in turn (default: the fast proof)",
                          group="verl's trainer")
    rollout_tp: int = _opt(1, "tensor-parallel size of verl's rollout in the trainer check (default 1)",
                           metavar="N", group="verl's trainer", kind=int)
    actor_tp: int = _opt(1, "tensor-parallel size of verl's actor (a tensor-parallel actor: megatron; default 1)",
                         metavar="N", group="verl's trainer", kind=int)
    family: tuple[str, ...] = _opt((), "model family verl's trainer trains (repeatable; `all`: every one; default: "
                                       "the fast proof's, every one with --thorough)", metavar="NAME",
                                   group="verl's trainer", repeat=True)
    model_config: tuple[str, ...] = _opt((), "a model's config.json (or its folder), shrunk to the check's size with "
                                             "random weights, trained like a family (repeatable)", metavar="PATH",
                                         group="verl's trainer", repeat=True)
    trainer_override: tuple[str, ...] = _opt((), "a Hydra override of verl's config for its trainer (KEY=VALUE, "
                                                 "+KEY=VALUE, ++KEY=VALUE or ~KEY), after the check's own: verify "
                                                 "with your own settings (repeatable); the report is then no verdict "
                                                 "on verl's defaults", metavar="KEY=VALUE", group="verl's trainer",
                                             repeat=True)
    ray: str | None = _opt(None, "verify every alive node of a Ray cluster (auto, HOST:PORT or ray://HOST:PORT) and "
                                 "compare them", metavar="ADDRESS", group="many nodes", nargs="?", const="auto")
    node_timeout: float = _opt(1800.0, "seconds a node may take before it is reported as hung (default 1800)",
                               group="many nodes", kind=float, cluster_only=True)
    allreduce: str = _opt("nccl", "the cross-node all-reduce: over every GPU (nccl), one rank per node on CPU (gloo), "
                                  "or none", choices=ALLREDUCE, group="many nodes", cluster_only=True)
    runtime_env: str | None = _opt(None, "JSON file of the Ray runtime_env the job's workers get (e.g. verl's "
                                         "env_vars): checks run under it", metavar="FILE", group="many nodes",
                                   cluster_only=True)
    skip_cluster_trainer: bool = _opt(False, "leave out the last step: verl's own trainer run once across every GPU "
                                             "node", group="many nodes", cluster_only=True)

    @property
    def mode(self) -> str:
        return "thorough" if self.thorough else "fast"

    @classmethod
    def flag(cls, name: str) -> str:
        meta = _meta(name)
        return meta["flag"] or "--" + name.replace("_", "-")

    @classmethod
    def from_args(cls, parsed) -> "VerifyOptions":
        """From the values a parser gave (its Namespace: the command layer parses, this only reads attributes)."""
        values = {}
        for f in fields(cls):
            value = getattr(parsed, f.name, f.default)
            if f.metadata["repeat"]:
                value = tuple(os.fspath(v) if isinstance(v, os.PathLike) else v for v in value or ())
            elif isinstance(value, os.PathLike):
                value = os.fspath(value)  # a Path from argparse's type=Path, or a caller
            values[f.name] = value
        return cls(**values)

    def to_argv(self) -> list[str]:
        """The options as a command line: only those not at their defaults, in their declared order."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            flag = self.flag(f.name)
            if isinstance(value, bool):
                out.append(flag)
            elif f.metadata["repeat"]:
                for item in value:
                    out += [flag, str(item)]
            elif f.metadata["nargs"] == "?" and value == f.metadata["const"]:
                out.append(flag)
            else:
                out += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
        return out

    def to_json(self) -> dict:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict) -> "VerifyOptions":
        known = {f.name: f for f in fields(cls)}
        if unknown := sorted(set(data) - set(known)):
            raise UserError(f"verify options: unknown option {unknown[0]!r}")
        return cls(**{k: tuple(v) if known[k].metadata["repeat"] else v for k, v in data.items()})

    def replace(self, **changes) -> "VerifyOptions":
        return dataclasses.replace(self, **changes)

    def for_node(self) -> "VerifyOptions":
        """What a node of `verify --ray` runs: the options of one machine's verify (the cluster's own and the tool
        machine's paths left out)."""
        cleared = {f.name: f.default for f in fields(self)
                   if f.metadata["cluster_only"] or f.metadata["local_only"]
                   or f.name in ("ray", "report", "python", "lock", "model_config")}
        return dataclasses.replace(self, **cleared)


def _meta(name: str) -> dict:
    for f in fields(VerifyOptions):
        if f.name == name:
            return dict(f.metadata)
    raise KeyError(name)


def option_fields():
    """(name, default, metadata) of every option, in declared order: what a parser is built from."""
    return [(f.name, f.default, dict(f.metadata)) for f in fields(VerifyOptions)]
