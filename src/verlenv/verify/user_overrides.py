"""--trainer-override: a user's own Hydra overrides of verl's config for the trainer check (their production settings:
an attention backend, a fusion, a router option), applied after every override of the check's own (the actor's, the
rollout's, the env's, the family's, the fast proof's). Checked before anything runs: each must be a Hydra override of
one dotted key, given once, and may not set what the check itself sets (its data, model, sizes, learning rate, steps,
reward, logging and checkpoints: what its judge reads). A report trained so is no verdict on verl's defaults, and the
compatibility matrix passes it over."""

import importlib
import sys

from verlenv.catalog.hydra import FORMS, OVERRIDE
from verlenv.errors import UserError


def trainer_check_module():
    """kernels/check_verl_trainer.py as a module: it and its siblings import `_common`, `_kernel_paths`,
    `_routed_experts`, `_models` and `_phases` by those names (they run as scripts in verify), so those names are
    given the packaged modules first, each before the module that imports it."""
    for name in ("_common", "_kernel_paths", "_routed_experts", "_models", "_phases"):
        sys.modules.setdefault(name, importlib.import_module(f"verlenv.verify.kernels.{name}"))
    return importlib.import_module("verlenv.verify.kernels.check_verl_trainer")


def checked(texts) -> tuple[str, ...]:
    """The overrides as given, or UserError (one line) for the first that is malformed, given twice for one key, or
    sets a key the check sets itself."""
    check = trainer_check_module()
    own, seen = check.own_keys(), {}
    for text in texts:
        if not OVERRIDE.fullmatch(text):
            raise UserError(f"--trainer-override {text!r}: not a Hydra override of verl's config; give {FORMS} "
                            "(e.g. actor_rollout_ref.rollout.enforce_eager=False)")
        key = check.override_key(text)
        if key in own:
            raise UserError(f"--trainer-override {text!r}: verify's trainer check sets {key} itself (its data, model, "
                            "sizes, learning rate, steps, reward, logging and checkpoints); override another key")
        if key in seen:
            raise UserError(f"--trainer-override: {key} given twice ({seen[key]!r}, {text!r}); give each key once")
        seen[key] = text
    return tuple(texts)
