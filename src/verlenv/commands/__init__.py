"""The command layer: one module per `verlenv` subcommand, its `register(sub)` (argparse) and its handler.

Flags are parsed and checked here and dispatched to the library below, which takes plain values and never
imports this layer (tests/test_layers.py)."""

import argparse

from verlenv import validate


def positive_int(option: str):
    """An argparse `type` for a count option (--jobs 4), so `--jobs -3` stops before anything starts."""
    def parse(text: str) -> int:
        value = validate.positive(text)
        if value is None:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number; give one such as 4")
        return value
    return parse
