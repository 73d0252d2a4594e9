"""The verification report: one JSON document (schema below), a markdown summary of it, a terminal table."""

import json
import os
import platform
import re
import socket
from datetime import datetime, timezone
from pathlib import Path

from packaging.utils import canonicalize_name

from verlenv.catalog import packages
from verlenv.fsutil import write_atomic
from verlenv.verify.results import KINDS, RESULTS, STATUSES, not_run, result_of, totals

SCHEMA_VERSION = 1
MODES = {"fast": "the fast proof: vLLM eager, checks side by side",
         "thorough": "verl's and vLLM's defaults (CUDA graphs, torch.compile), one check at a time"}
# The numbers a check reports about where its time went (verl's trainer check: kernels/_phases.py).
PHASE_PREFIX = "phase/"
# Where the output is not a terminal (CI, nohup, a pipe): tables as wide as their rows, never folded at 80 columns.
PIPED_WIDTH = 1000

_STRING_OR_NULL = {"type": ["string", "null"]}
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "verlenv verify report",
    "type": "object",
    "required": ["schema_version", "command", "timestamp", "machine", "gpus", "driver", "cuda", "env", "versions",
                 "stack", "variant", "profile", "selection", "checks", "totals", "result", "exit_code", "wall_seconds"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        # How the run was started: `nox -s verify…` (the noxfile says so through VERLENV_LAUNCHER) or verlenv itself.
        "launcher": {"enum": ["nox", "verlenv"]},
        "timestamp": {"type": "string", "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"},
        "machine": {"type": "object", "required": ["hostname", "cpus", "memory_gib", "platform"],
                    "properties": {"hostname": {"type": "string"}, "cpus": {"type": "integer"},
                                   "memory_gib": {"type": ["number", "null"]}, "platform": {"type": "string"}}},
        "gpus": {"type": "array", "items": {
            "type": "object", "required": ["name", "compute_capability", "memory_mib"],
            "properties": {"name": {"type": "string"}, "compute_capability": {"type": "string"},
                           "memory_mib": {"type": ["integer", "null"]}}}},
        "driver": _STRING_OR_NULL,
        "cuda": {"type": "object", "required": ["stack", "torch"],
                 "properties": {"stack": {"type": "string"}, "torch": _STRING_OR_NULL}},
        "env": {"type": "object", "required": ["python", "python_version", "prefix"],
                "properties": {"python": {"type": "string"}, "python_version": {"type": "string"},
                               "prefix": {"type": "string"}}},
        # Installed versions of what data/packages.toml names (the distributions of its packages and `report`).
        "versions": {"type": "object", "additionalProperties": _STRING_OR_NULL, "required": ["torch"]},
        "stack": {"type": "string"},
        "variant": {"type": "string"},
        "profile": {"oneOf": [{"type": "null"}, {
            "type": "object", "required": ["key", "title", "arch", "fp8", "forced", "thresholds"],
            "properties": {"key": {"type": "string"}, "title": {"type": "string"}, "arch": {"type": "string"},
                           "fp8": {"type": "boolean"}, "forced": {"type": "boolean"},
                           "thresholds": {"type": "object"}}}]},
        "selection": {"type": "object", "required": ["gpu", "lock", "skipped_packages", "only", "required_packages"],
                      "properties": {"gpu": {"type": "string"}, "lock": _STRING_OR_NULL,
                                     "skipped_packages": {"type": "array", "items": {"type": "string"}},
                                     "only": _STRING_OR_NULL,
                                     "required_packages": {"type": "array", "items": {"type": "string"}}}},
        "checks": {"type": "array", "items": {
            "type": "object",
            "required": ["name", "package", "kind", "required", "status", "reason", "numbers", "seconds"],
            "properties": {"name": {"type": "string"}, "package": {"type": "string"}, "kind": {"enum": list(KINDS)},
                           "required": {"type": "boolean"}, "status": {"enum": list(STATUSES)},
                           "reason": {"type": "string"}, "numbers": {"type": "object"}, "seconds": {"type": "number"},
                           "log": {"type": "string"}, "diagnosis": {"type": "array", "items": {"type": "object"}}}}},
        # required_not_run, static, kernel: not in reports written before the verdict said what was not run.
        "totals": {"type": "object", "required": [*STATUSES, "required_failed", "checks"],
                   "additionalProperties": {"type": "integer"}},
        # incomplete: not in reports written before the verdict said what was not run (they said pass).
        "result": {"enum": list(RESULTS)},
        # The screen's verdict line, word for word; not in reports written before it.
        "verdict": {"type": "string"},
        "exit_code": {"enum": [0, 1]},
        "wall_seconds": {"type": "number"},
        # Not in reports written before the fast proof existed (they ran what thorough runs, in turn).
        "mode": {"enum": list(MODES)},
        # Not in reports written before the model families.
        "trainer": {"type": "object", "required": ["actor", "rollout", "families"]},
    },
}


def memory_gib() -> float | None:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    m = re.search(r"^MemTotal:\s+(\d+) kB", text, re.M)
    return round(int(m.group(1)) / 2**20, 1) if m else None


def versions(facts) -> dict[str, str | None]:
    installed = {canonicalize_name(d.name): d.version for d in facts.distributions}
    return packages.table().report_names(installed)


def build(run, command: list[str], started: datetime, launcher: str = "verlenv") -> dict:
    s = run.settings
    t = totals(run.results)
    profile = None
    if s.profile:
        p = s.profile
        profile = {"key": p.key, "title": p.title, "arch": p.arch, "fp8": p.fp8, "forced": s.forced,
                   "thresholds": p.thresholds}
    data = {
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "launcher": launcher,
        "timestamp": started.astimezone(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"hostname": socket.gethostname(), "cpus": os.cpu_count() or 0, "memory_gib": memory_gib(),
                    "platform": platform.platform()},
        "gpus": [{"name": g.name, "compute_capability": g.compute_capability, "memory_mib": g.memory_mib}
                 for g in s.gpus],
        "driver": run.driver,
        "cuda": {"stack": s.stack.cuda, "torch": (run.facts.torch or {}).get("cuda")},
        "env": {"python": run.facts.executable, "python_version": run.facts.version, "prefix": run.facts.prefix},
        "versions": versions(run.facts),
        "stack": s.stack.name,
        "variant": s.variant.name,
        "profile": profile,
        "selection": {"gpu": s.profile.key if s.profile else "cpu",
                      "lock": None if s.no_lock or not s.lock else str(s.lock),
                      "skipped_packages": sorted(s.skipped), "only": s.only,
                      "required_packages": sorted(s.scope.required)},
        "checks": [r.to_dict() for r in run.results],
        "totals": t,
        "result": result_of(t["required_failed"], t["required_not_run"]),
        "exit_code": run.exit_code,
        "wall_seconds": run.seconds,
        "mode": s.mode,
        "trainer": trainer_section(s),
    }
    data["verdict"] = ": ".join(verdict(data))
    return data


def trainer_section(s) -> dict:
    """What verl's trainer check trained: the variant's actor and rollout, each family (its source), how many ran at
    once, with the bound that set it, and the user's own overrides (--trainer-override), where given."""
    out = {"actor": s.variant.actor, "rollout": s.variant.rollout,
           "families": [{"name": f["name"], "source": f.get("source")} for f in s.families]}
    if s.trainer_override:
        out["user_overrides"] = list(s.trainer_override)
    return {**out, "at_once": s.slots().why} if s.families else out


def default_path(root: Path, stack: str, variant: str, gpu: str, started: datetime) -> Path:
    stamp = started.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return root / "reports" / f"verify-{stack}-{variant}-{gpu}-{stamp}.json"


def json_text(report: dict) -> str:
    return json.dumps(report, indent=2) + "\n"


def write_json(path: Path, report: dict) -> None:
    write_atomic(path, json_text(report))


def _cell(text: str, limit: int = 180) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _scalars(numbers: dict, limit: int = 4) -> str:
    items = [(k, v) for k, v in numbers.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)
             and len(str(v)) <= 24]
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in items[:limit])


def phase_rows(numbers: dict) -> list[tuple[str, float, int]]:
    """(name, seconds, depth) of a check's phase numbers, in the order it reported them: depth 0 for a phase, 1
    for a part of one (`phase/rollout_server/model_load_s` -> ("rollout_server/model_load", s, 1))."""
    rows = []
    for key, value in numbers.items():
        if key.startswith(PHASE_PREFIX) and key.endswith("_s") and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            name = key[len(PHASE_PREFIX):-len("_s")]
            rows.append((name, float(value), name.count("/")))
    return rows


def phase_table(numbers: dict) -> list[str]:
    """A markdown table of a check's phases with each one's share of the total; empty without phases."""
    rows = phase_rows(numbers)
    total = next((s for name, s, _ in rows if name == "total"), None)
    if not rows:
        return []
    out = ["| phase | s | share |", "|---|---:|---:|"]
    for name, seconds, depth in rows:
        shown = ("&nbsp;&nbsp;" * depth + name.split("/")[-1]) if depth else f"**{name}**" if name == "total" else name
        share = f"{100 * seconds / total:.0f}%" if total and name != "total" else ""
        out.append(f"| {shown} | {seconds:.1f} | {share} |")
    return out


def verdict(report: dict) -> tuple[str, str]:
    """(head, the rest) of the line that says what the run proved: FAIL, PASS, or, where required checks could not
    run (no GPU), what passed and how many were not run; then counts that add up to the table's rows."""
    checks = report["checks"]
    t = report["totals"]
    missing = sum(not_run(_as_result(c)) for c in checks)
    kinds = ", ".join(f"{sum(c['kind'] == k for c in checks)} {k}" for k in KINDS)
    counts = (f"{len(checks)} checks ({kinds}): {t['pass']} pass, {t['warn']} warn, {t['fail']} fail, "
              f"{t['skip']} skip in {report['wall_seconds']:.1f} s")
    unproven = (f"{missing} required GPU checks not run (no GPU here)" if report["profile"] is None
                else f"{missing} required checks not run")
    result = result_of(t["required_failed"], missing)  # what the JSON's `result` says (build)
    if result == "fail":
        return "FAIL", "; ".join([f"{t['required_failed']} required failed", *([unproven] if missing else []), counts])
    if result == "pass":
        return "PASS", f"every required check passed; {counts}"
    head = "static checks passed" if report["profile"] is None else "required checks that ran passed"
    return head, f"{unproven}; {counts}"


def not_run_names(report: dict) -> list[str]:
    return [c["name"] for c in report["checks"] if not_run(_as_result(c))]


def _as_result(check: dict):
    from verlenv.verify.results import CheckResult

    fields = ("name", "package", "kind", "status", "reason", "required")
    return CheckResult(**{k: check[k] for k in fields})


def markdown(report: dict) -> str:
    gpus = report["gpus"]
    gpu_text = (f"{len(gpus)}x {gpus[0]['name']} (compute capability {gpus[0]['compute_capability']}, "
                f"{gpus[0]['memory_mib']} MiB)" if gpus else "none (static checks only)")
    profile = report["profile"]
    m = report["machine"]
    head, rest = verdict(report)
    missing = not_run_names(report)
    lines = [
        f"# verlenv verify: {report['stack']} / {report['variant']} / {profile['key'] if profile else 'cpu'}",
        "",
        f"**{head}**: {rest}.",
        *(["", f"Not run: {', '.join(missing)}."] if missing else []),
        "",
        f"- command: `{' '.join(report['command'])}`"
        + (" (started by nox)" if report.get("launcher") == "nox" else ""),
        f"- when: {report['timestamp']}",
        f"- machine: {m['hostname']}, {m['cpus']} CPUs, {m['memory_gib']} GiB, {m['platform']}",
        f"- GPU: {gpu_text}" + (f"; profile {profile['key']} (sm {profile['arch']})"
                                 + (", forced" if profile["forced"] else "") if profile else ""),
        f"- driver: {report['driver'] or 'none'}; CUDA: stack {report['cuda']['stack']}, "
        f"torch {report['cuda']['torch']}",
        f"- env: {report['env']['python']} (Python {report['env']['python_version']})",
        f"- mode: {report.get('mode', 'thorough (written before the fast proof)')}"
        + (f" ({MODES[report['mode']]})" if report.get("mode") in MODES else ""),
        "- versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v),
    ]
    if report.get("trainer"):
        t = report["trainer"]
        lines.append(f"- verl's trainer: {t['actor']} actor, {t['rollout']} rollout; families "
                     + (", ".join(f["name"] for f in t["families"]) or "none")
                     + (f"; {t['at_once']}" if t.get("at_once") else ""))
        if t.get("user_overrides"):
            lines.append("- your overrides of verl's config (--trainer-override; not verl's defaults): "
                         + ", ".join(f"`{o}`" for o in t["user_overrides"]))
    if report["selection"]["skipped_packages"]:
        lines.append(f"- skipped by request: {', '.join(report['selection']['skipped_packages'])}")
    lines += ["", "| status | check | package | required | numbers | reason |", "|---|---|---|---|---|---|"]
    for c in report["checks"]:
        lines.append(f"| {c['status']} | {_cell(c['name'], 60)} | {c['package']} | {'yes' if c['required'] else 'no'} "
                     f"| {_cell(_scalars(c['numbers']), 90)} | {_cell(c['reason'])} |")
    for c in report["checks"]:
        table = phase_table(c["numbers"])
        if table:
            lines += ["", f"## Where {c['name']} spent its time", "",
                      "Read from the trainer's own output (the marker lines of verl, Ray, vLLM and FlashInfer); a "
                      "phase whose markers were not seen is left out, and the time no phase accounts for is "
                      "`unattributed`. Indented rows are parts of the phase above them.", "", *table]
    failed = [c for c in report["checks"] if c["status"] == "fail" and c.get("diagnosis")]
    if failed:
        lines += ["", "## Known failures recognised"]
        for c in failed:
            for d in c["diagnosis"]:
                lines.append(f"- {c['name']}: [{d['id']}] {d.get('title', '')}".rstrip())
    logged = [c for c in report["checks"] if c["status"] == "fail" and c.get("log")]
    if logged:
        lines += ["", "## Output of failed checks (last lines, child processes included)"]
        for c in logged:
            lines += ["", f"### {c['name']}", "", "~~~", c["log"].replace("~~~", "~ ~ ~"), "~~~"]
    return "\n".join(lines) + "\n"


STYLE = {"pass": "green", "warn": "yellow", "fail": "red", "skip": "dim"}
COLUMNS = ("status", "check", "package", "req", "s", "reason")


def fitting_console(stderr: bool = False):
    """A rich console for a report: the terminal's width, or, piped, one wide enough that no row is folded."""
    from rich.console import Console

    plain = Console(stderr=stderr)
    return plain if plain.is_terminal else Console(stderr=stderr, width=PIPED_WIDTH)


def _cells(c: dict) -> tuple[str, ...]:
    status = "FAIL" if c["status"] == "fail" and c["required"] else c["status"]
    return status, c["name"], c["package"], "yes" if c["required"] else "", f"{c['seconds']:.1f}", c["reason"]


def rows(report: dict) -> list[str]:
    """The table as plain rows (one per check, each as long as it is: for logs, pipes and grep)."""
    table = [COLUMNS, *(_cells(c) for c in report["checks"])]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS) - 1)]
    return ["  ".join([*(cell.rjust(w) if i == 4 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))),
                       row[-1]]).rstrip() for row in table]


def print_table(report: dict, console=None) -> None:
    """The report's table and verdict: a rich table on a terminal, plain full-width rows elsewhere."""
    from rich.table import Table

    console = console or fitting_console()
    profile = report["profile"]
    title = (f"verlenv verify {report['stack']}/{report['variant']} on "
             f"{profile['title'] if profile else 'no GPU (static checks only)'}"
             + (f", {report['mode']}" if report.get("mode") else ""))
    if console.is_terminal:
        table = Table(title=title, title_justify="left", show_lines=False)
        for name, kw in zip(COLUMNS, ({}, {"overflow": "fold"}, {}, {}, {"justify": "right"},
                                      {"overflow": "fold", "ratio": 1})):
            table.add_column(name, **kw)
        for c in report["checks"]:
            cells = _cells(c)
            status = "[bold red]FAIL[/]" if cells[0] == "FAIL" else f"[{STYLE[c['status']]}]{c['status']}[/]"
            table.add_row(status, *cells[1:])
        console.print(table)
    else:
        for line in [title, *rows(report)]:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    for c in report["checks"]:
        for d in c.get("diagnosis") or []:
            if c["status"] == "fail":
                console.print(f"  {c['name']}: known failure [{d['id']}] {d.get('title', '')}; fix: "
                              f"{(d.get('fix') or ['see verlenv doctor'])[0]}", highlight=False, soft_wrap=True)
    head, rest = verdict(report)
    style = {"FAIL": "bold red", "PASS": "bold green"}.get(head, "bold yellow")
    console.print(f"[{style}]{head}[/]: {rest}", highlight=False, soft_wrap=True)
    if missing := not_run_names(report):
        console.print(f"  not run: {', '.join(missing)}", highlight=False, soft_wrap=True)
