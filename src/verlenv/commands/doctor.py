"""`verlenv doctor`: diagnose a log (file or stdin), or probe a live environment; with --ray, every node of a Ray
cluster."""

import json
import os
import sys
from pathlib import Path

from verlenv.catalog.stacks import VARIANT_HELP
from verlenv.commands import add_env_options
from verlenv.doctor import facts as facts_mod, logs, matcher, probes
from verlenv.errors import UserError


def register(sub) -> None:
    p = sub.add_parser(
        "doctor",
        help="recognise known environment failures in a log, or probe an environment, and say the fix",
        description="With LOG (a file, a directory of logs, or - for stdin): report each known failure found in "
        "it, most specific first, with its file and line; with --python too, check each finding's fix against that "
        "env. Without LOG: probe the environment of --python (default: the stack's env, as verify picks it) before "
        "it bites. Exit 0: healthy, no match or warnings only; 1: problems found; 2: bad input.",
    )
    p.add_argument("log", nargs="?", metavar="LOG",
                   help="log file (plain or gzipped), a directory of logs (read recursively), or - for stdin")
    add_env_options(p, "interpreter of the environment to probe, or to check a LOG's findings against (default "
                       "without LOG: the active env unless it is verlenv's own, else .venv-<stack>-<variant>)",
                    stack_help="stack whose driver and lock apply (default: the catalog's default)",
                    variant_help="variant whose lock to compare with (" + VARIANT_HELP + ")")
    p.add_argument("--max-files", type=int, default=logs.MAX_FILES, metavar="N",
                   help=f"with a LOG directory: open at most N files, logs first (default {logs.MAX_FILES}; 0: all)")
    p.add_argument("--max-gb", type=float, default=logs.MAX_BYTES / (1 << 30), metavar="GB",
                   help=f"with a LOG directory: read at most GB gigabytes (default {logs.MAX_BYTES >> 30:g}; 0: all)")
    p.add_argument("--lock", type=Path, help="lock file (uv pip compile format) to compare installed versions with")
    p.add_argument("--only", metavar="PROBE[,PROBE]", help=f"run only these probes ({', '.join(probes.PROBES)})")
    p.add_argument("--json", action="store_true", help="print JSON for tools")
    p.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                   help="probe every alive node of a Ray cluster (auto, HOST:PORT or ray://...) and compare them")
    p.add_argument("--node-timeout", type=float, default=600.0,
                   help="with --ray: seconds before a node is reported as hung")
    p.set_defaults(func=handle)


PROGRESS_FILES = 5000  # a directory scan says where it is every this many files (on stderr)
PROGRESS_BYTES = 1 << 30  # ... and every this many bytes read


def handle(args) -> int:
    for flag, value in (("--max-files", args.max_files), ("--max-gb", args.max_gb)):
        if value < 0:
            raise UserError(f"{flag} {value:g}: must be 0 (no bound) or a positive number")
    if args.log is not None:
        given = [o for o, v in (("--stack", args.stack), ("--variant", args.variant), ("--lock", args.lock),
                                ("--only", args.only), ("--ray", args.ray)) if v]
        if given:
            raise UserError(f"{', '.join(given)} apply to environment probes; run `verlenv doctor` without LOG for "
                            "those (with LOG, --python checks the findings' fixes against an env)")
        return _diagnose_log(args.log, args.json, args.python, args.max_files, int(args.max_gb * (1 << 30)))
    if args.max_files != logs.MAX_FILES or args.max_gb != logs.MAX_BYTES / (1 << 30):
        raise UserError("--max-files and --max-gb bound the reading of a LOG directory; give one")
    if args.ray is not None:  # each node probes its own env
        return _doctor_cluster(args)
    return _probe(args)


def _diagnose_log(log: str, as_json: bool, python: str | None, max_files: int, max_bytes: int) -> int:
    facts = facts_mod.gather(python) if python else None  # bad --python: exit 2 before a long scan
    source, diagnoses, notes = logs.diagnose_path(log, max_files, max_bytes, _Progress(log))
    checks = probes.check_findings(diagnoses, facts) if facts else {}
    if as_json:
        _emit(json.dumps({"source": source, "matched": len(diagnoses), "diagnoses": [d.to_dict() for d in diagnoses],
                          "notes": [{**n._asdict(), "read": n.read} for n in notes],
                          **({"python": facts.executable,
                              "checks": {fid: [r.to_dict() for r in rs] for fid, rs in checks.items()}}
                             if facts else {})}, indent=2))
    else:
        _emit("\n".join([matcher.format_diagnoses(diagnoses, source), *logs.format_notes(notes),
                         *(probes.format_checks(checks, facts.executable) if facts else [])]))
    # warnings (TE ignoring flash-attn, a slow load) are printed by healthy runs too: not a failing exit
    return 1 if any(d.severity == "error" for d in diagnoses) else 0


class _Progress:
    """Where a long directory scan is, on stderr: a line at the start, every PROGRESS_FILES files or
    PROGRESS_BYTES bytes, and at the end; nothing for a short one."""

    def __init__(self, log: str):
        self.log = log
        self.next_files, self.next_bytes = PROGRESS_FILES, PROGRESS_BYTES
        self.started = False

    def __call__(self, p: logs.Progress) -> None:
        if p.found < PROGRESS_FILES and p.read_bytes < PROGRESS_BYTES:
            return
        if not self.started:
            self.started = True
            self._say(f"{p.found} files under {self.log}: reading {p.planned} (logs first)")
        if p.done >= self.next_files or p.read_bytes >= self.next_bytes or p.done == p.planned:
            self.next_files = p.done + PROGRESS_FILES
            self.next_bytes = p.read_bytes + PROGRESS_BYTES
            self._say(f"{p.done} of {p.planned} files read ({p.read_bytes / 1e9:.1f} GB), "
                      f"{p.findings} with a finding")

    @staticmethod
    def _say(line: str) -> None:
        print(f"verlenv doctor: {line}", file=sys.stderr, flush=True)


def _default_python(args) -> str:
    """--python, else the env verify would pick (the active one unless it is verlenv's own, else the stack's
    .venv-<stack>-<variant>), else this interpreter (outside a checkout)."""
    if args.python:
        return args.python
    from verlenv.catalog import stacks
    from verlenv.env.install import default_python

    try:
        cat = stacks.load()
    except UserError:
        return sys.executable
    # A bad --stack/--variant is the user's error.
    variant = cat.variant(args.stack, args.variant or stacks.DEFAULT_VARIANT)
    try:
        return default_python(variant, cat.root, "doctor")
    except UserError:
        return sys.executable


def _probe(args) -> int:
    python = _default_python(args)
    facts = facts_mod.gather(python)
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    results = probes.run_all(facts, args.stack, args.variant, args.lock, only=only)
    if args.json:
        _emit(json.dumps({"python": facts.executable, "probes": [r.to_dict() for r in results]}, indent=2))
    else:
        _emit(probes.format_probes(results, facts.executable))
    return 1 if any(r.status == "problem" for r in results) else 0


def _doctor_cluster(args) -> int:
    """`doctor --ray`: the doctor's probes on every node, and the fingerprint differences."""
    from verlenv import validate
    from verlenv.catalog import pins, stacks
    from verlenv.cluster import launch
    from verlenv.env.install import default_python

    if args.node_timeout <= 0:
        raise UserError(f"--node-timeout {args.node_timeout:g}: must be a positive number of seconds")
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    unknown = [n for n in only or [] if n not in probes.PROBES]
    if unknown:
        raise UserError(f"unknown probe {', '.join(unknown)}; valid: {', '.join(probes.PROBES)}")
    cat = stacks.load()
    variant = cat.variant(args.stack, args.variant or stacks.DEFAULT_VARIANT)
    python = validate.python3(args.python or default_python(variant, cat.root, "doctor"))
    lock = args.lock or pins.lock_path(cat.root, variant, pins.machine_platform())
    if not lock.is_file():
        raise UserError(f"--lock {lock}: no such file")
    data = launch.doctor_cluster(cat, variant, python, lock, address=args.ray, probes=only,
                                 node_timeout=args.node_timeout)
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        launch.print_report(data)
    return data["exit_code"]


def _emit(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # The reader (e.g. `| head`) left early; keep the exit code, drop the rest quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
