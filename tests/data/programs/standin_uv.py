"""A stand-in for uv (a test double: the test needs resolutions it can hold until their siblings have started, which
a real index never waits for). `--version` answers as uv does. `pip compile KEY.in -o OUT ...`, run in a folder
named for the platform, records in STANDIN_UV_DIR that KEY/PLATFORM started (with what had finished by then), waits
until every resolution named in STANDIN_UV_BESIDE[KEY/PLATFORM] has started too, then writes the committed lock of
KEY for PLATFORM (from STANDIN_UV_LOCKS) as OUT and records that it finished."""

import json
import os
import sys
import time
from pathlib import Path

# A hang guard: a sibling that never starts fails the run instead of blocking it.
GUARD_S = float(os.environ.get("STANDIN_UV_GUARD_S", "300"))


def main(args: list[str]) -> int:
    if args == ["--version"]:
        print("uv 0.0.0 (stand-in)")
        return 0
    key, out = Path(args[2]).stem, args[args.index("-o") + 1]
    platform = Path.cwd().name
    marks = Path(os.environ["STANDIN_UV_DIR"])
    me = f"{key}@{platform}"
    finished = sorted(p.stem for p in marks.glob("*.finished"))
    (marks / f"{me}.started").write_text(json.dumps({"finished": finished, "argv": args}))
    beside = json.loads(os.environ["STANDIN_UV_BESIDE"]).get(me, [])
    deadline = time.monotonic() + GUARD_S
    while not all((marks / f"{other}.started").exists() for other in beside):
        if time.monotonic() > deadline:
            print(f"stand-in uv: {me} waited {GUARD_S:.0f} s for {beside} to start", file=sys.stderr)
            return 1
        time.sleep(0.05)
    locks = Path(os.environ["STANDIN_UV_LOCKS"])
    Path(out).write_text((locks / out).read_text())
    (marks / f"{me}.finished").write_text("")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
