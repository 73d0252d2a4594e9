"""Where the time of `verlenv verify` goes, from the committed verify reports (docs/verification/*.json): the whole
run, vLLM's own check and verl's trainer check, and the trainer's phases where the report has them.

Every report with verl's trainer check contributes what it has: reports written before the phase table
(2026-11-24/25) give the trainer's wall, start-up (launch to step 1), time to the first rollout and step times;
later ones add `phase/<name>_s` (kernels/_phases.py), printed in the order the trainer ran them.
Writes a markdown table and the same numbers as JSON.
Usage: python benchmarks/trainer_phases.py [--reports docs/verification] [--out docs/benchmarks/trainer-phases]
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from verlenv.fsutil import write_atomic  # noqa: E402
from verlenv.verify.report import phase_rows  # noqa: E402

TRAINER = "verl/trainer/"
# What every report with the trainer check can say: (row label, where it is: "report" field or a check's number).
SUMMARY = (
    ("whole verify", ("report", "wall_seconds")),
    ("vLLM check: generate", ("vllm/generate/bf16", "seconds")),
    ("vLLM check: engine start", ("vllm/generate/bf16", "engine_start_s")),
    ("trainer check", ("trainer", "seconds")),
    ("trainer: launch to exit", ("trainer", "wall_s")),
    ("trainer: launch to step 1", ("trainer", "startup_s")),
    ("trainer: launch to end of first rollout", ("trainer", "time_to_first_rollout_s")),
    ("trainer: step 1", ("trainer", "step1_step_s")),
    ("trainer: step 1 rollout", ("trainer", "step1_gen_s")),
    ("trainer: step 2", ("trainer", "step2_step_s")),
    ("trainer: step 2 rollout", ("trainer", "step2_gen_s")),
)


def trainer_check(report: dict) -> dict | None:
    return next((c for c in report.get("checks", []) if c["name"].startswith(TRAINER)
                 and c["name"].endswith("-steps")), None)


def column(path: Path, report: dict) -> dict:
    """One report's numbers: the summary rows, and its trainer's phases (empty before the phase table)."""
    trainer = trainer_check(report)
    checks = {c["name"]: c for c in report["checks"]}
    values = {}
    for label, (where, key) in SUMMARY:
        if where == "report":
            value = report.get(key)
        else:
            check = trainer if where == "trainer" else checks.get(where)
            value = None if check is None else check.get(key) if key == "seconds" else check["numbers"].get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            values[label] = round(float(value), 1)
    gpus = report.get("gpus") or []
    return {"report": path.name, "date": report["timestamp"][:10], "variant": report["variant"],
            "gpu": f"{len(gpus)}x {gpus[0]['name']}" if gpus else "none",
            "mode": report.get("mode", "thorough (before the fast proof)"), "result": report["result"],
            "trainer": trainer["status"] if trainer else None, "summary": values,
            "phases": {name: round(seconds, 1) for name, seconds, _ in phase_rows(trainer["numbers"])}}


def collect(folder: Path) -> list[dict]:
    columns = []
    for path in sorted(folder.glob("*.json")):
        try:
            report = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(report, dict) and "checks" in report and trainer_check(report) is not None:
            columns.append(column(path, report))
    return columns


def markdown(columns: list[dict]) -> str:
    head = ["| | " + " | ".join(f"[{c['report']}](../verification/{c['report']})" for c in columns) + " |",
            "|---|" + "---:|" * len(columns)]
    about = [("variant, GPU", lambda c: f"{c['variant']}, {c['gpu']}"), ("mode", lambda c: c["mode"]),
             ("verify result, trainer check", lambda c: f"{c['result']}, {c['trainer']}")]
    lines = ["# Where `verlenv verify` spends its time", "",
             "Made by `python benchmarks/trainer_phases.py` from the committed reports; seconds.", "", *head]
    lines += [f"| {label} | " + " | ".join(fn(c) for c in columns) + " |" for label, fn in about]
    lines += [f"| {label} | " + " | ".join(_cell(c["summary"].get(label)) for c in columns) + " |"
              for label, _ in SUMMARY]
    phased = [c for c in columns if c["phases"]]
    lines += ["", "## The trainer's phases", ""]
    if not phased:
        lines.append("No committed report has them yet: the trainer check records them from this commit on.")
        return "\n".join(lines) + "\n"
    names = list(dict.fromkeys(name for c in phased for name in c["phases"]))
    lines += ["| phase | " + " | ".join(c["report"] for c in phased) + " |", "|---|" + "---:|" * len(phased)]
    for name in names:
        shown = "&nbsp;&nbsp;" * name.count("/") + name.split("/")[-1] if "/" in name else name
        lines.append(f"| {shown} | " + " | ".join(_cell(c["phases"].get(name)) for c in phased) + " |")
    return "\n".join(lines) + "\n"


def _cell(value) -> str:
    return "" if value is None else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reports", type=Path, default=ROOT / "docs" / "verification")
    p.add_argument("--out", type=Path, help="write OUT.md and OUT.json (e.g. docs/benchmarks/trainer-phases)")
    args = p.parse_args(argv)
    columns = collect(args.reports)
    if not columns:
        print(f"{args.reports}: no verify report with verl's trainer check", file=sys.stderr)
        return 2
    text = markdown(columns)
    print(text, end="")
    if args.out:
        write_atomic(args.out.with_suffix(".md"), text)
        write_atomic(args.out.with_suffix(".json"), json.dumps({"reports": columns}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
