"""The command layer: one module per `verlenv` subcommand, its `register(sub)` (argparse) and its handler.

Flags are parsed and checked here and dispatched to the library below, which takes plain values and never
imports this layer (tests/test_layers.py)."""
