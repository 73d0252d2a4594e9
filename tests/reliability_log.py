"""Where the reliability tests note each case they tried and what happened: the rows of docs/reliability.md
(scripts/reliability_table.py runs the tests with $VERLENV_RELIABILITY_LOG set and writes the table)."""

import json
import os


def record(section: str, case: str, result: str, ok: bool) -> None:
    path = os.environ.get("VERLENV_RELIABILITY_LOG")
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps({"section": section, "case": case, "result": result, "ok": ok}) + "\n")
