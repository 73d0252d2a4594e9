"""Recall and precision of `verlenv doctor` on the real log excerpts of tests/data/logs.

Each excerpt is named <family>-<source>.log (`none-` for a failing log whose cause is not an environment
failure: the doctor must say nothing). tests/data/logs/ holds the excerpts the signatures were written from;
tests/data/logs/heldout/ the ones collected after, never used to write them; tests/data/logs/heldout-runtime/
the run-time failures (Ray, vLLM, SGLang, NCCL, loader) collected after the run-time families were frozen, from
other threads than their development excerpts, and kept out of the tests' expectations. A held-out excerpt's family is
"seen" when the development set has an excerpt of it, "unseen" when its signatures were written from the
failure's description alone.
  recall    = held-out excerpts whose family the doctor ranks first / excerpts with a family
  precision = excerpts whose first-ranked diagnosis is right / excerpts where the doctor named anything
Usage: python benchmarks/doctor_recall.py [--out docs/benchmarks/doctor-recall.json]
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "data" / "logs"


def family(path: Path) -> str:
    return path.name.split("-", 1)[0]


def excerpt(path: Path) -> str:
    return path.read_text().partition("\n")[2]


def score(paths: list[Path], seen: set[str]) -> dict:
    from verlenv.doctor import diagnose_text

    rows = []
    for p in paths:
        found = [d.id for d in diagnose_text(excerpt(p))]
        want = family(p)
        group = "negative" if want == "none" else ("seen" if want in seen else "unseen")
        rows.append({"file": p.name, "family": want, "group": group, "found": found,
                     "right": found[:1] == [want] if want != "none" else not found})
    out = {"rows": rows}
    for group in ("seen", "unseen", "all"):
        picked = [r for r in rows if r["group"] == group or (group == "all" and r["group"] != "negative")]
        named = [r for r in rows if r["found"] and (group == "all" or r["group"] in (group, "negative"))]
        out[group] = {
            "excerpts": len(picked),
            "families": len({r["family"] for r in picked}),
            "recall": round(sum(r["right"] for r in picked) / len(picked), 3) if picked else None,
            "precision": round(sum(r["found"][0] == r["family"] for r in named) / len(named), 3) if named else None,
            "missed": [r["file"] for r in picked if not r["right"]],
        }
    negatives = [r for r in rows if r["group"] == "negative"]
    out["negatives"] = {"logs": len(negatives), "false_alarms": [r["file"] for r in negatives if r["found"]]}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    development = sorted(q for q in LOGS.glob("*.log") if not q.name.startswith("healthy-"))
    heldout = sorted((LOGS / "heldout").glob("*.log"))
    runtime = sorted((LOGS / "heldout-runtime").glob("*.log"))
    seen = {family(q) for q in development}
    report = {"development": score(development, seen), "heldout": score(heldout, seen),
              "heldout-runtime": score(runtime, seen)}
    for name, r in report.items():
        print(f"{name}:")
        for group in ("seen", "unseen", "all"):
            g = r[group]
            if g["excerpts"]:
                print(f"  {group:7s} {g['excerpts']:3d} excerpts, {g['families']:2d} families: "
                      f"recall {g['recall']:.3f}, precision {g['precision']}, missed {g['missed']}")
        print(f"  negatives {r['negatives']['logs']}: false alarms {r['negatives']['false_alarms']}")
    for name in ("heldout", "heldout-runtime"):
        for row in report[name]["rows"]:
            if not row["right"]:
                print(f"  {name} miss: {row['file']}: found {row['found']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
