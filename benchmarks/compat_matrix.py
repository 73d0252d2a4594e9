"""The compatibility matrix: which model families verl's own trainer has trained in which stack, variant and mode, read
from the committed GPU reports (docs/verification/*.json, verify reports and verify --ray reports).

A cell is the newest report's verdict for that stack x variant x family x mode: pass, fail, known (a known upstream
failure, with its link), or "not run" when no committed report ran it. Where other reports ran the same model (the same
initial entropy and logit spread of the check's model, to the last digit, with the same versions of every package both
have) and its rollout and actor agreed within verify's bound in some runs and not in others, the cell says in how many
of them they did not: such a verdict is no stable one (GPU visits S, V, W: deepseek-v3 on megatron passed, failed step
2's bound, passed). Other failures are not counted: the reports do not say whether the env was fixed since. A cell whose
report is older than its family row's model_since (families.toml) says it ran the row's earlier model. A report whose
env left out, by request (--skip-package), a package its actor needs for a family (data/backends.toml needs, after that
family's overrides) is no verdict on the stack for that family and is passed over, as is a report whose trainer had its
user's own overrides of verl's config (--trainer-override). A failure the report counted whose output the family table's
known issues recognise now is "known*" (the report itself is left as it was written). Reports written before the
families (2026-11-24/25) name their trainer check verl/trainer/<variant>/grpo-2-steps: that was Llama.
Writes a markdown table (each cell linking its report) and the same as JSON.
Usage: python benchmarks/compat_matrix.py [--reports docs/verification] [--out docs/benchmarks/compat-matrix]
"""

import argparse
import datetime
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from verlenv.catalog import backends, families, stacks  # noqa: E402
from verlenv.fsutil import write_atomic  # noqa: E402

# verl/trainer/<variant>/<family>/grpo-N-steps, or the older verl/trainer/<variant>/grpo-N-steps (Llama then).
CHECK = re.compile(r"^verl/trainer/(?P<variant>[\w.-]+)/(?:(?P<family>[\w.-]+)/)?grpo-\d+-steps$")
OLD_FAMILY = "llama"
# The trainer check's words for a rollout/actor disagreement (verify/kernels/check_verl_trainer.py judge()).
DISAGREED = re.compile(r"rollout/actor probability correlation|mean \|p_rollout - p_actor\|")
MODES = ("fast", "thorough")


def model_of(numbers: dict) -> tuple | None:
    """What tells one check's model from another's in a report: its initial entropy and logit spread (measured on the
    model as built, the same on every GPU: visits K and N); None for a report that has not both."""
    mark = (numbers.get("init_entropy_mean"), numbers.get("init_logit_std"))
    return None if None in mark else mark


def trainer_results(report: dict, table: families.Table) -> list[tuple[str, str, str, str, tuple | None, bool]]:
    """(variant, family, status, known-issue url or "", model_of, whether it failed on the rollout/actor agreement)
    of every trainer check in a verify report, and of the cluster trainer in a verify --ray report."""
    out = []
    for check in report.get("checks", []):
        m = CHECK.match(check["name"])
        if m:
            variant, family = m["variant"], m["family"] or OLD_FAMILY
            numbers = check.get("numbers") or {}
            known = numbers.get("known_issue") or ""
            status = "known" if check["status"] == "fail" and not check["required"] and known else check["status"]
            if status == "fail" and family in table.families:
                issue = table.families[family].known_failure([check.get("log", ""), check.get("reason", "")], variant)
                status, known = ("known*", issue["url"]) if issue else (status, known)
            disagreed = status == "fail" and bool(DISAGREED.search(check.get("reason", "")))
            out.append((variant, family, status, known, model_of(numbers), disagreed))
    trainer = report.get("trainer")
    if isinstance(trainer, dict) and trainer.get("status") in ("pass", "fail"):
        out.append((report["variant"], trainer.get("family") or OLD_FAMILY, trainer["status"], "", None, False))
    return out


def skipped_needs(report: dict, actors: backends.Table, env, family) -> set[str]:
    """The packages the report's actor needs, given every override its trainer had (the env's, the family's: as
    verify's runner decides them), that its env left out by request (GPU visit P: apex)."""
    trainer = report.get("trainer")
    actor = trainer.get("actor") if isinstance(trainer, dict) else None
    rollout = trainer.get("rollout") if isinstance(trainer, dict) else None
    if actor not in actors.actors or rollout not in actors.rollouts:
        return set()
    skipped = set((report.get("selection") or {}).get("skipped_packages") or [])
    overrides = actors.override_order(actor, rollout, env, family, report.get("mode") == "thorough")
    return skipped & actors.actor(actor).needed_packages(overrides)


def user_overrides(report: dict) -> list[str]:
    """The overrides of verl's config a report's trainer was given by its user (--trainer-override)."""
    trainer = report.get("trainer")
    return list(trainer.get("user_overrides") or []) if isinstance(trainer, dict) else []


def env_overrides(cat: stacks.Catalog, stack: str, variant: str) -> list[str]:
    """The variant's trainer_overrides (stacks.toml), none for a stack or variant the catalog no longer has."""
    found = cat.stacks.get(stack)
    return list(found.variants[variant].trainer_overrides) if found and variant in found.variants else []


def cells(reports: Path, table: families.Table, cat: stacks.Catalog) -> dict[tuple[str, str, str, str], dict]:
    """(stack, variant, family, mode) -> the newest report's cell, with the runs of its model (same_model) where
    other reports ran it too and their verdicts differ."""
    found: dict[tuple[str, str, str, str], list[dict]] = {}
    actors = backends.table()
    for path in sorted(reports.glob("*.json")):
        try:
            report = json.loads(path.read_text())
        except ValueError:
            continue
        if not isinstance(report, dict) or "stack" not in report or "variant" not in report:
            continue
        if user_overrides(report):  # trained with the user's own settings (--trainer-override): not verl's defaults
            continue
        mode = report.get("mode", "thorough")  # reports before the fast proof ran what thorough runs
        for variant, family, status, known, model, disagreed in trainer_results(report, table):
            row = table.families.get(family)  # a config-<name> column: no family's overrides, every need holds
            env = env_overrides(cat, report["stack"], variant)
            if skipped_needs(report, actors, env, list(row.overrides) if row else []):
                continue
            stamp = report.get("timestamp", "")
            found.setdefault((report["stack"], variant, family, mode), []).append(
                {"status": status, "report": path.name, "timestamp": stamp, "known_issue": known, "model": model,
                 "disagreed": disagreed, "versions": report.get("versions") or {},
                 "earlier_model": bool(row and row.model_since and before(stamp, row.model_since))})
    return {key: newest_with_history(runs) for key, runs in found.items()}


def before(stamp: str, since: str) -> bool:
    """Whether a report's timestamp is earlier than a row's model_since (a report without one: yes)."""
    try:
        return datetime.datetime.fromisoformat(stamp) < datetime.datetime.fromisoformat(since)
    except (TypeError, ValueError):
        return True


def newest_with_history(runs: list[dict]) -> dict:
    """The newest run's cell (the later file on a tie of timestamps); with `same_model` {runs, disagreed, reports}
    where its model's runs passed and failed on the rollout/actor agreement."""
    newest = max(enumerate(runs), key=lambda run: (run[1]["timestamp"], run[0]))[1]
    cell = {k: newest[k] for k in ("status", "report", "timestamp", "known_issue")}
    if newest["earlier_model"]:
        cell["earlier_model"] = True
    same = [run for run in runs if newest["model"] is not None and run["model"] == newest["model"]
            and (run["status"] == "pass" or run["disagreed"])
            and all(run["versions"][p] == v for p, v in newest["versions"].items()
                    if v is not None and run["versions"].get(p) is not None)]  # None: not in that env
    disagreed = sum(run["disagreed"] for run in same)
    if 0 < disagreed < len(same):
        cell["same_model"] = {"runs": len(same), "disagreed": disagreed,
                              "reports": sorted(run["report"] for run in same)}
    return cell


def matrix(reports: Path, cat: stacks.Catalog, table: families.Table) -> dict:
    found = cells(reports, table, cat)
    names = table.names() + sorted({k[2] for k in found} - set(table.names()))
    rows = []
    for stack in cat.stacks.values():
        for variant in stack.variants:
            for mode in MODES:
                row = {"stack": stack.name, "variant": variant, "mode": mode, "families": {}}
                for family in names:
                    row["families"][family] = found.get((stack.name, variant, family, mode), {"status": "not run"})
                rows.append(row)
    return {"families": names, "rows": rows}


def markdown(data: dict, link_base: str = "../verification/") -> str:
    lines = ["# Compatibility matrix: verl's own trainer, per model family",
             "",
             "Made by `python benchmarks/compat_matrix.py` from the committed GPU reports (docs/verification): the "
             "newest report's verdict for each stack, variant, mode and family; `not run` where no committed report "
             "ran it; `known` is a known upstream failure (the link in the report), not the env's; `known*` a failure "
             "the report counted, whose output a family's known issue recognises since (the link after it); `(k of n "
             "runs below the agreement bound)`: other reports ran the same model, and in k of the n runs its rollout "
             "and actor did not agree within verify's bound, so the verdict is not a stable one; `(the row's earlier "
             "model)`: the report ran the family before its row's model changed (families.toml model_since), so it "
             "is no verdict on the model the row builds now. Each "
             "verdict links its report.", "",
             "| stack | variant | mode | " + " | ".join(data["families"]) + " |",
             "|---|---|---|" + "---|" * len(data["families"])]
    for row in data["rows"]:
        cells_ = []
        for family in data["families"]:
            cell = row["families"][family]
            text = cell["status"] if cell["status"] == "not run" else f"[{cell['status']}]({link_base}{cell['report']})"
            if cell["status"] == "known*":
                text += f" ({cell['known_issue']})"
            if "same_model" in cell:
                same = cell["same_model"]
                text += f" ({same['disagreed']} of {same['runs']} runs below the agreement bound)"
            if cell.get("earlier_model"):
                text += " (the row's earlier model)"
            cells_.append(text)
        lines.append(f"| {row['stack']} | {row['variant']} | {row['mode']} | " + " | ".join(cells_) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reports", type=Path, default=ROOT / "docs" / "verification")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks" / "compat-matrix")
    args = p.parse_args(argv)
    data = matrix(args.reports, stacks.load(ROOT / "stacks.toml"), families.table())
    write_atomic(args.out.with_suffix(".json"), json.dumps(data, indent=1) + "\n")
    write_atomic(args.out.with_suffix(".md"), markdown(data))
    print(f"wrote {args.out.with_suffix('.md')} and .json ({len(data['rows'])} rows x {len(data['families'])} "
          "families)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
