"""Where torch's files are and what they are now, without importing torch (a few ms, where importing it takes
seconds): native/toolchain.py keys its cache of torch_info.py's answer with this. Standard library only; no arguments.

    python torch_files.py -> {"executable": ..., "prefix": ..., "torch_root": DIR or null,
                              "files": {"NAME": [inode, size, mtime_ns], ...}}
"""

import glob
import importlib.util
import json
import os
import sys


def main():
    spec = importlib.util.find_spec("torch")
    root = os.path.dirname(spec.origin) if spec and spec.origin else None
    stats = {}
    if root:
        for name in ["__init__.py", "version.py", "lib/libtorch_cpu.so", *glob.glob("_C*.so", root_dir=root)]:
            if os.path.exists(path := os.path.join(root, name)):
                s = os.stat(path)
                stats[name] = [s.st_ino, s.st_size, s.st_mtime_ns]
    print(json.dumps({"executable": sys.executable, "prefix": sys.prefix, "torch_root": root, "files": stats}))


if __name__ == "__main__":
    main()
