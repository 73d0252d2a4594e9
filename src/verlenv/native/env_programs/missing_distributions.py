"""Which of the named distributions the env lacks (a build without isolation needs its build.requires installed:
native/build.py). Standard library only.

    python missing_distributions.py NAME... -> ["NAME", ...]
"""

import importlib.metadata as m
import json
import sys


def installed(name):
    try:
        m.distribution(name)
    except m.PackageNotFoundError:
        return False
    return True


if __name__ == "__main__":
    print(json.dumps([name for name in sys.argv[1:] if not installed(name)]))
