"""For each named distribution, the tags its WHEEL file gives and the Python extension modules it installed (verify
tells a wrong interpreter tag in WHEEL from a real ABI mismatch: verify/static.py). Standard library only.

    python wheel_facts.py NAME... -> {"NAME": {"tags": [...], "extensions": [...]}, ...}
"""

import importlib.metadata as m
import json
import sys


def main(names):
    out = {}
    for name in names:
        d = m.distribution(name)
        files = [str(f) for f in (d.files or [])]
        out[name] = {"tags": [line.split(":", 1)[1].strip() for line in (d.read_text("WHEEL") or "").splitlines()
                              if line.startswith("Tag:")],
                     "extensions": [f for f in files
                                    if f.endswith((".so", ".pyd")) and (".cpython-" in f or ".abi3." in f)]}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
