"""`verlenv doctor`: diagnose a log (file or stdin), or probe a live environment."""

import json
import os
import sys
from pathlib import Path

from verlenv.doctor import facts as facts_mod
from verlenv.doctor import logs, matcher, probes
from verlenv.errors import UserError


def register(sub) -> None:
    p = sub.add_parser(
        "doctor",
        help="recognise known environment failures in a log, or probe an environment, and say the fix",
        description="With LOG (a file, a directory of logs, or - for stdin): report each known failure found in "
        "it, most specific first, with its file and line. Without LOG: probe the environment of --python before it bites. Exit 0: healthy or no match; "
        "1: problems found; 2: bad input.",
    )
    p.add_argument("log", nargs="?", metavar="LOG",
                   help="log file (plain or gzipped), a directory of logs (read recursively), or - for stdin")
    p.add_argument("--python", help="interpreter of the environment to probe (default: this one)")
    p.add_argument("--stack", help="stack whose driver and lock apply (default: the catalog's default)")
    p.add_argument("--variant", help="variant whose lock to compare with (fsdp or megatron)")
    p.add_argument("--lock", type=Path, help="lock file (uv pip compile format) to compare installed versions with")
    p.add_argument("--only", metavar="PROBE[,PROBE]", help=f"run only these probes ({', '.join(probes.PROBES)})")
    p.add_argument("--json", action="store_true", help="print JSON for tools")
    p.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                   help="probe every alive node of a Ray cluster (auto, HOST:PORT or ray://...) and compare them")
    p.add_argument("--node-timeout", type=float, default=600.0, help="with --ray: seconds before a node is reported as hung")
    p.set_defaults(func=handle)


def handle(args) -> int:
    if args.log is not None:
        given = [o for o, v in (("--python", args.python), ("--stack", args.stack), ("--variant", args.variant),
                                ("--lock", args.lock), ("--only", args.only), ("--ray", args.ray)) if v]
        if given:
            raise UserError(f"{', '.join(given)} apply to environment probes; run `verlenv doctor` without LOG for those")
        return _diagnose_log(args.log, args.json)
    if args.ray is not None:  # each node probes its own env
        from verlenv.cluster.command import doctor_cluster

        return doctor_cluster(args)
    return _probe(args)


def _diagnose_log(log: str, as_json: bool) -> int:
    source, diagnoses = logs.diagnose_path(log)
    if as_json:
        _emit(json.dumps({"source": source, "matched": len(diagnoses), "diagnoses": [d.to_dict() for d in diagnoses]}, indent=2))
    else:
        _emit(matcher.format_diagnoses(diagnoses, source))
    return 1 if diagnoses else 0


def _probe(args) -> int:
    python = args.python or sys.executable
    facts = facts_mod.gather(python)
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    results = probes.run_all(facts, args.stack, args.variant, args.lock, only=only)
    if args.json:
        _emit(json.dumps({"python": facts.executable, "probes": [r.to_dict() for r in results]}, indent=2))
    else:
        _emit(probes.format_probes(results, facts.executable))
    return 1 if any(r.status == "problem" for r in results) else 0


def _emit(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # The reader (e.g. `| head`) left early; keep the exit code, drop the rest quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
