"""The installed version of each named distribution, null for one the env lacks (install --bundle checks the bundle's
base against the target env: bundle/offline.py). Standard library only.

    python installed_versions.py NAME... -> {"NAME": "VERSION" or null, ...}
"""

import json
import sys
from importlib import metadata


def main(names):
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
