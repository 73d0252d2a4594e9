"""For each named distribution installed from a local wheel file, that file's URL (install keeps the env's source-built
wheels through a sync: env/install.py). Standard library only; a name not installed is left out.

    python local_wheels.py NAME... -> {"NAME": "file:///.../NAME-....whl", ...}
"""

import json
import sys
from importlib import metadata


def main(names):
    out = {}
    for name in names:
        try:
            text = metadata.distribution(name).read_text("direct_url.json")
        except metadata.PackageNotFoundError:
            continue
        url = json.loads(text).get("url", "") if text else ""
        if url.startswith("file://") and url.endswith(".whl"):
            out[name] = url
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
