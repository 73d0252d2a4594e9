"""Import torch, then each named module (a freshly installed wheel's package and extension modules: native/build.py);
a module that does not import ends this with its traceback and a non-zero exit. Prints nothing.

    python import_modules.py MODULE...
"""

import importlib
import sys


def main(modules):
    # torch first: an extension module needs the torch libraries it links against loaded before it.
    importlib.import_module("torch")
    for name in modules:
        importlib.import_module(name)


if __name__ == "__main__":
    main(sys.argv[1:])
