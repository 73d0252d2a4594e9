"""What the env's python sees for each named variable, and where its .pth would be: its site-packages and prefix
(env/runtime_env.py). Standard library only.

    python variables_seen.py '["NAME", ...]' -> {"site": PURELIB, "prefix": PREFIX, "seen": {"NAME": value or null}}
"""

import json
import os
import sys
import sysconfig


def main(names):
    print(json.dumps({'site': sysconfig.get_paths()['purelib'], 'prefix': sys.prefix,
                      'seen': {n: os.environ.get(n) for n in names}}))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
