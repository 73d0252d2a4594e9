"""`verlenv toolchain`: the CUDA_HOME and host compiler a build of the env would use, or why there is none."""

import json
import shlex
import sys
from dataclasses import asdict
from pathlib import Path

from verlenv import validate
from verlenv.native import toolchain


def register(sub) -> None:
    p = sub.add_parser("toolchain", help="find or assemble a CUDA_HOME matching the env's torch")
    p.add_argument("--python", default=sys.executable, help="interpreter of the env (default: this one)")
    p.add_argument("--cache-dir", type=Path, default=Path(".verlenv"), help="where an assembled CUDA_HOME goes")
    p.add_argument("--json", action="store_true", help="print the decision as JSON")
    p.add_argument("--shell", action="store_true", help="print `export` lines for a shell to eval")
    p.set_defaults(func=_main)


def _main(args) -> int:
    info, tc = toolchain.resolve(validate.interpreter(args.python), args.cache_dir.resolve())
    if tc.warning and not args.json:
        print(f"verlenv toolchain: warning: {tc.warning}", file=sys.stderr)  # stderr: --shell's stdout is eval'd
    if args.json:
        print(json.dumps({"torch": asdict(info), "toolchain": {**asdict(tc), "match": tc.match}}, indent=2))
    elif args.shell:
        for k, v in tc.env.items():
            print(f"export {k}={shlex.quote(v)}")
    else:
        print(f"torch {info.torch} (CUDA {info.cuda}, cxx11 ABI {info.cxx11_abi}, {info.python_tag})")
        print(tc.describe())
    return 0
