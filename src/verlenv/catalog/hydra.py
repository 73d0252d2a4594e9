"""Hydra's override grammar as verl's config takes it: the forms an override may have, the key one sets, and a key's
value after a list of them. The stack's trainer_overrides, the backends' conditional needs and a user's
--trainer-override all read overrides through it. (The trainer check, a script run by the env's python, parses its own
with check_verl_trainer.override_key: it cannot import this package.)"""

import re

_KEY = r"[A-Za-z_][\w-]*(?:\.[\w-]+)*"
# Hydra's forms for a config value: set (key=v), add (+key=v), add or set (++key=v), delete (~key, ~key=v).
OVERRIDE = re.compile(rf"(?:\+\+|\+)?{_KEY}=.*|~{_KEY}(?:=.*)?", re.S)
FORMS = "KEY=VALUE, +KEY=VALUE (add), ++KEY=VALUE (add or set) or ~KEY (delete), KEY dotted as in verl's config"


def key(text: str) -> str:
    """The config key an override sets or deletes."""
    return text.partition("=")[0].lstrip("+~")


def value_after(overrides, name: str, default: str) -> str:
    """`name`'s value after these overrides, in order: the last that sets it wins, with or without + or ++; one that
    deletes it (~name) puts `default` back; `default` where none touches it."""
    value = default
    for text in overrides:
        if key(text) != name:
            continue
        value = default if text.startswith("~") else text.partition("=")[2]
    return value
