"""The env's torch as a build needs it (native/toolchain.py's TorchInfo): torch is imported. No arguments.

    python torch_info.py -> {"python", "python_tag", "torch", "cuda", "cxx11_abi", "torch_lib", "purelib"}
"""

import json
import pathlib
import sys
import sysconfig

import torch


def main():
    print(json.dumps({
        "python": sys.executable,
        "python_tag": "cp%d%d" % sys.version_info[:2],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "torch_lib": str(pathlib.Path(torch.__file__).parent / "lib"),
        "purelib": sysconfig.get_paths()["purelib"],
    }))


if __name__ == "__main__":
    main()
