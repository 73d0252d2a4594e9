"""`verify --ray` and `doctor --ray`, the tool's side: hand the work to the env's interpreter (the Ray driver), then
report: a node x check table, the placement, the fingerprint differences, the cross-node all-reduce, verl's trainer
across the cluster; JSON with `nodes`."""

import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from verlenv import catalog
from verlenv.cluster import compare
from verlenv.cluster.verdict import exit_code, node_problems
from verlenv.errors import UserError
from verlenv.fsutil import write_atomic
from verlenv.sources import sha256_file

PACKAGE_DIR = Path(__file__).resolve().parent.parent
CONNECT_S = 120  # joining the cluster and shipping verlenv to it, beyond the nodes' own time
ALLREDUCE_S = 420  # allreduce.run's own bound (300 s per step) plus starting its actors
TRAINER_S = 1800  # cluster/trainer.py's BUDGET_S: verl's trainer (900 s) and three rounds of tasks on every node
UNREACHABLE = 3  # the driver's exit code when the cluster's address does not answer


def run_driver(python: str, spec: dict, timeout: float) -> dict:
    """Run the driver in the env's interpreter with only the verlenv package added to its path."""
    with tempfile.TemporaryDirectory(prefix="verlenv-ray-") as tmp:
        (Path(tmp) / "verlenv").symlink_to(PACKAGE_DIR)
        request, out = Path(tmp) / "request.json", Path(tmp) / "cluster.json"
        request.write_text(json.dumps(spec))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tmp, *filter(None, [os.environ.get("PYTHONPATH")])])}
        try:
            proc = subprocess.run([python, "-m", "verlenv.cluster.driver", str(request), str(out)], env=env,
                                  stdout=subprocess.PIPE, stderr=None, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise UserError(f"--ray: the Ray driver did not finish within {timeout:.0f} s") from None
        if proc.returncode == UNREACHABLE and proc.stdout.strip():
            raise UserError(proc.stdout.strip().splitlines()[-1])
        if proc.returncode != 0 or not out.exists():
            raise UserError(f"--ray: the Ray driver failed (exit {proc.returncode}) on "
                            f"{spec['address']!r}; is a Ray cluster of this env running there (`ray status`)?")
        return json.loads(out.read_text())


def statuses(row: dict) -> dict[str, str]:
    """check (or probe) -> its status on this node."""
    if "probes" in row:
        return {p["probe"]: p["status"] for p in row["probes"]}
    return {r["name"]: r["status"] for r in row.get("results", [])}


def verify_cluster(cat: catalog.Catalog, variant: catalog.Variant, python: str, lock: Path | None, *, address: str,
                   gpu: str, force: bool, skipped: list[str], only: str | None, timeout: float, node_timeout: float,
                   allreduce: str, runtime_env: dict, report: Path | None, command: list[str],
                   skip_cluster_trainer: bool = False, thorough: bool = False, rollout_tp: int = 1,
                   actor_tp: int = 1) -> int:
    """Verify every node of the cluster at `address`, then (unless skip_cluster_trainer) run verl's trainer across
    it; write the JSON report, print the tables, return the exit code. thorough, rollout_tp and actor_tp apply to
    every node's checks and to the cluster's trainer alike."""
    started = datetime.now(timezone.utc)
    spec = {"address": address, "runtime_env": runtime_env, "catalog": str(cat.root / "stacks.toml"),
            "stack": variant.stack.name,
            "variant": variant.name, "lock": str(lock.absolute()) if lock else None, "gpu": gpu,
            "force": force, "skipped": sorted(skipped), "only": only, "timeout": timeout,
            "node_timeout": node_timeout, "allreduce": allreduce, "skip_cluster_trainer": skip_cluster_trainer,
            "thorough": thorough, "rollout_tp": rollout_tp, "actor_tp": actor_tp}
    path = report or cat.root / "reports" / f"verify-cluster-{variant.key}-{started:%Y%m%dT%H%M%SZ}.json"
    spec["trainer_log"] = str(path.absolute().with_name(path.stem + ".trainer.log"))
    print(f"verlenv verify --ray {address}: {variant.key}, driver {python}", file=sys.stderr, flush=True)
    data = run_driver(python, spec, node_timeout + CONNECT_S + ALLREDUCE_S + (0 if skip_cluster_trainer else TRAINER_S))
    data = {"schema_version": 1, "command": command,
            "timestamp": started.isoformat(timespec="seconds"), "stack": variant.stack.name, "variant": variant.name,
            "mode": "thorough" if thorough else "fast",
            "lock": {"path": str(lock), "sha256": sha256_file(lock)} if lock else None, **data}
    data["exit_code"] = exit_code(data)
    data["result"] = "pass" if data["exit_code"] == 0 else "fail"
    data["wall_seconds"] = round((datetime.now(timezone.utc) - started).total_seconds(), 2)
    write_atomic(path, json.dumps(data, indent=1) + "\n")
    print_report(data)
    print(f"report: {path}", file=sys.stderr)
    return data["exit_code"]


def doctor_cluster(cat: catalog.Catalog, variant: catalog.Variant, python: str, lock: Path, *, address: str,
                   probes: list[str] | None, node_timeout: float) -> dict:
    """The doctor's probes on every node of the cluster at `address`, and the fingerprint differences."""
    spec = {"what": "doctor", "address": address, "catalog": str(cat.root / "stacks.toml"),
            "stack": variant.stack.name, "variant": variant.name, "lock": str(lock.absolute()), "probes": probes,
            "node_timeout": node_timeout, "allreduce": "off"}
    data = run_driver(python, spec, node_timeout + CONNECT_S)
    data["exit_code"] = exit_code(data)
    return data


def print_report(data: dict, console=None) -> None:
    from rich.table import Table

    from verlenv.verify.report import fitting_console

    console = console or fitting_console(stderr=True)  # piped: rows as wide as they are, not folded at 80 columns
    nodes = data["nodes"]
    table = Table(title=f"{len(nodes)} node(s): checks", show_lines=False)
    table.add_column("check")
    for n in nodes:
        table.add_column(n["name"])
    table.add_row("node", *[n["state"] for n in nodes])
    status = {n["name"]: statuses(n) for n in nodes}
    for check in sorted({c for s in status.values() for c in s}):
        cells = [status[n["name"]].get(check, "-") for n in nodes]
        if not set(cells) <= {"pass", "ok"}:  # a row of passes on every node says nothing; the count below does
            table.add_row(check, *cells)
    table.add_row("passed", *[str(sum(v in ("pass", "ok") for v in status[n["name"]].values())) for n in nodes])
    console.print(table)
    for n in nodes:
        for line in node_problems(n)[:10]:
            console.print(f"[red]{n['name']}[/red] {line}", markup=True, highlight=False)
    if data.get("placement"):
        placed = Table(title="placement (shown, not compared)")
        placed.add_column("fact")
        for n in nodes:
            placed.add_column(n["name"], overflow="fold")
        for p in data["placement"]:
            placed.add_row(p["fact"], *[compare.shown(p["values"].get(n["name"])) if n["name"] in p["values"] else "-"
                                        for n in nodes])
        console.print(placed)
    if data["differences"]:
        diff = Table(title=f"{len(data['differences'])} fingerprint difference(s)")
        for col in ("fact", "node", "value"):
            diff.add_column(col, overflow="fold")
        for d in data["differences"]:
            for i, (name, value) in enumerate(d["values"].items()):
                mark = " *" if name in d["odd_nodes"] else ""
                diff.add_row(d["fact"] if i == 0 else "", name + mark, compare.shown(value))
        console.print(diff)
    else:
        console.print("fingerprints: the env is identical on every node that answered")
    reduce = data.get("allreduce")
    if reduce and reduce.get("rows"):
        # Bus bandwidth is 0 by definition with one rank: nothing crossed a link.
        sizes = ("not meaningful with one rank" if reduce["world"] == 1 else
                 ", ".join(f"{r['bytes'] >> 20} MiB {r['busbw_gbps']:.1f} GB/s" for r in reduce["rows"]))
        console.print(f"all-reduce ({reduce['backend']}, {reduce['world']} ranks on {reduce['nodes']} node(s)): "
                      f"{'exact sums' if reduce['ok'] else reduce.get('error')}; bus bandwidth {sizes}")
    elif reduce:
        console.print(f"all-reduce: {reduce.get('skipped') or reduce.get('error')}")
    if data.get("trainer"):
        trainer_report(data["trainer"], console)
    console.print(f"result: {'pass' if data['exit_code'] == 0 else 'FAIL'}")


def trainer_report(t: dict, console) -> None:
    """verl's trainer across the cluster: what ran, the numbers judged, the phases, and why it failed."""
    if t["status"] in ("skipped", "refused"):
        console.print(f"verl's trainer across the cluster: {t['status']} ({t['reason']})")
        return
    m, ph = t.get("metrics", {}), t.get("phases", {})
    steps = sorted({int(k[4:].split("_", 1)[0]) for k in m if k.startswith("step") and k.endswith("_step_s")})

    def per_step(key, fmt):
        return ", ".join(format(m[f"step{s}_{key}"], fmt) if f"step{s}_{key}" in m else "-" for s in steps) or "-"
    shape = f"{t['nnodes']} node(s) x {t['n_gpus_per_node']} GPU(s)"
    console.print(f"verl's trainer across the cluster ({shape}: {', '.join(t['nodes'])}): "
                  f"{'pass' if t['status'] == 'pass' else 'FAIL'} in {t.get('seconds', 0):.0f} s", highlight=False)
    if steps:
        console.print(f"  steps {per_step('step_s', '.1f')} s; rollout/actor pearson {per_step('pearson', '.5f')}; "
                      f"grad norm {per_step('grad_norm', '.3g')}", highlight=False)
    # The check's phases at the top level (phase/<name>_s), in the order the trainer ran them.
    top = [(k[len("phase/"):-2], v) for k, v in ph.items() if k.startswith("phase/") and k.count("/") == 1
           and k.endswith("_s") and k != "phase/total_s"]
    if top:
        console.print("  phases (s): " + ", ".join(f"{name} {v:.1f}" for name, v in top)
                      + (f"; total {ph['phase/total_s']:.0f}" if "phase/total_s" in ph else ""), highlight=False)
    if "weights_rel_change" in m:
        console.print(f"  weights changed by {m['weights_rel_change']:.3g} (checkpoint on {t.get('checkpoint_node')})",
                      highlight=False)
    for line in t.get("problems", [])[:10]:
        console.print(f"  [red]{line}[/red]", markup=True, highlight=False)
    if t.get("log"):
        console.print(f"  log: {t['log']}", highlight=False)
