"""The command layer: one module per `verlenv` subcommand, its `register(sub)` (argparse) and its handler.

Flags are parsed and checked here and dispatched to the library below, which takes plain values and never
imports this layer (tests/test_layers.py)."""

import argparse

from verlenv import validate
from verlenv.catalog.stacks import STACK_HELP, VARIANT_HELP


def positive_int(option: str):
    """An argparse `type` for a count option (--jobs 4), so `--jobs -3` stops before anything starts."""
    def parse(text: str) -> int:
        value = validate.positive(text)
        if value is None:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number; give one such as 4")
        return value
    return parse




def add_env_options(p, python_help: str, *, stack_help: str = STACK_HELP, variant_help: str = VARIANT_HELP,
                    variant_default: str | None = None, python_default: str | None = None) -> None:
    """--stack, --variant and --python, written once for every command that works on one env."""
    p.add_argument("--stack", help=stack_help)
    p.add_argument("--variant", default=variant_default, help=variant_help)
    p.add_argument("--python", default=python_default, help=python_help)


def add_options(p, option_fields, skip: tuple[str, ...] = ()) -> None:
    """Add a dataclass's options (verify/options.py: flag, default, help, group) to a parser, in their order."""
    groups = {}
    for name, default, meta in option_fields:
        if name in skip:
            continue
        target = p
        if meta["group"]:
            target = groups.setdefault(meta["group"], p.add_argument_group(meta["group"]))
        flag = meta["flag"] or "--" + name.replace("_", "-")
        kw = {"help": meta["help"], "dest": name}
        if isinstance(default, bool):
            kw["action"] = "store_true"
        elif meta["repeat"]:
            kw.update(action="append", default=[])
        else:
            kw["default"] = default
            if meta["kind"] is int:
                kw["type"] = positive_int(flag)
            elif meta["kind"] is float:
                kw["type"] = float
            if meta["nargs"]:
                kw.update(nargs=meta["nargs"], const=meta["const"])
        if meta["metavar"] and not isinstance(default, bool):
            kw["metavar"] = meta["metavar"]
        if meta["choices"]:
            kw["choices"] = meta["choices"]
        target.add_argument(flag, **kw)
