"""Recall and precision of `verlenv doctor` on the real log excerpts of tests/data/logs.

Each excerpt is named <family>-<source>.log (`none-` for a failing log whose cause is not an environment
failure: the doctor must say nothing). tests/data/logs/ holds the excerpts the signatures were written from;
tests/data/logs/heldout/ the ones collected after, never used to write them; tests/data/logs/heldout-runtime/
the run-time failures (Ray, vLLM, SGLang, NCCL, loader) collected after the run-time families were frozen, from
other threads than their development excerpts, and kept out of the tests' expectations. A held-out excerpt's family is
"seen" when the development set has an excerpt of it, "unseen" when its signatures were written from the
failure's description alone. tests/data/logs/heldout-2026/ (issue 52) is a fresh set split by thread before its
signatures were written (its README): it is scored by when each failure shows, install / load time or run time, and
its `benign-` and `healthy-` excerpts are negatives (nothing may be named). tests/data/logs/heldout-2026-12/ holds
excerpts of the failures added last (F63-F72), collected after their signatures by someone who had not read them.
  recall    = held-out excerpts whose family the doctor ranks first / excerpts with a family
  precision = excerpts whose first-ranked diagnosis is right / excerpts where the doctor named anything
Usage: python benchmarks/doctor_recall.py [--out docs/benchmarks/doctor-recall.json] [--src <a verlenv src tree>]
"""

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "data" / "logs"
FRESH = LOGS / "heldout-2026"
NEGATIVE = ("none", "benign", "healthy")
# The 2026 set's labels by when the failure shows (heldout-2026/README.md); every other label is run time.
INSTALL_TIME = {"F42", "F55", "F58"}


def family(path: Path) -> str:
    return path.name.split("-", 1)[0]


def excerpt(path: Path) -> str:
    return path.read_text().partition("\n")[2]


def score(paths: list[Path], group_of, groups: tuple[str, ...]) -> dict:
    """Each excerpt's diagnosis, and recall, precision and misses per group (group_of(family) names an excerpt's
    group; "negative" ones must draw no diagnosis) and over all of them."""
    from verlenv.doctor import diagnose_text

    rows = []
    for p in paths:
        found = [d.id for d in diagnose_text(excerpt(p))]
        want = family(p)
        rows.append({"file": p.name, "family": want, "group": group_of(want), "found": found,
                     "right": found[:1] == [want] if want not in NEGATIVE else not found})
    out = {"rows": rows}
    for group in (*groups, "all"):
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


def score_known(paths: list[Path], seen: set[str]) -> dict:
    """The older sets: a family is "seen" when the development set has an excerpt of it."""
    return score(paths, lambda f: "negative" if f in NEGATIVE else ("seen" if f in seen else "unseen"),
                 ("seen", "unseen"))


def score_fresh(paths: list[Path]) -> dict:
    """The 2026 set: recall at install / load time and at run time, precision, false alarms on the negatives."""
    return score(paths, lambda f: "negative" if f in NEGATIVE else ("install" if f in INSTALL_TIME else "run"),
                 ("install", "run"))


def check_split() -> None:
    """The rule the 2026 set was split by (its README): a thread on the wrong side stops the scoring."""
    for side in ("dev", "heldout"):
        for p in (FRESH / side).glob("*.log"):
            url = p.read_text().split()[2]
            want = "dev" if hashlib.sha256(url.encode()).digest()[0] % 2 == 0 else "heldout"
            if want != side:
                raise SystemExit(f"{p}: on the {side} side, but its thread's hash puts it on the {want} side")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--src", type=Path, default=ROOT / "src",
                   help="the verlenv source tree to score (an older commit's, for a baseline)")
    args = p.parse_args()
    sys.path.insert(0, str(args.src))
    development = sorted(q for q in LOGS.glob("*.log") if not q.name.startswith("healthy-"))
    heldout = sorted((LOGS / "heldout").glob("*.log"))
    runtime = sorted((LOGS / "heldout-runtime").glob("*.log"))
    seen = {family(q) for q in development}
    check_split()
    report = {"development": score_known(development, seen), "heldout": score_known(heldout, seen),
              "heldout-runtime": score_known(runtime, seen),
              "2026-dev": score_fresh(sorted((FRESH / "dev").glob("*.log"))),
              "2026-heldout": score_fresh(sorted((FRESH / "heldout").glob("*.log"))),
              "heldout-2026-12": score_known(sorted((LOGS / "heldout-2026-12").glob("*.log")), seen)}
    for name, r in report.items():
        print(f"{name}:")
        for group in ("seen", "unseen", "install", "run", "all"):
            if group not in r:
                continue
            g = r[group]
            if g["excerpts"]:
                print(f"  {group:7s} {g['excerpts']:3d} excerpts, {g['families']:2d} families: "
                      f"recall {g['recall']:.3f}, precision {g['precision']}, missed {g['missed']}")
        print(f"  negatives {r['negatives']['logs']}: false alarms {r['negatives']['false_alarms']}")
    for name in ("heldout", "heldout-runtime", "2026-heldout", "heldout-2026-12"):
        for row in report[name]["rows"]:
            if not row["right"]:
                print(f"  {name} miss: {row['file']}: found {row['found']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
