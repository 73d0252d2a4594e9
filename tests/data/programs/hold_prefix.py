"""Holds `verlenv install`'s lock on a prefix, as a first installer does, until its stdin is closed."""
import sys
from pathlib import Path

from verlenv.env.install import prefix_lock

with prefix_lock(Path(sys.argv[1]), False):
    print("held", flush=True)
    sys.stdin.read()
