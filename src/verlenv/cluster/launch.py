"""`verify --ray` and `doctor --ray`, the tool's side: hand the work to the env's interpreter (the Ray driver), then
report: a node x check table, the placement, the fingerprint differences, the cross-node all-reduce, verl's trainer
across the cluster; JSON with `nodes`."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from verlenv.catalog import stacks
from verlenv.cluster import compare
from verlenv.cluster.verdict import exit_code, node_problems
from verlenv.errors import UserError
from verlenv.fsutil import write_atomic
from verlenv.native.sources import sha256_file
from verlenv.verify.options import VerifyOptions

PACKAGE_DIR = Path(__file__).resolve().parent.parent
CONNECT_S = 120  # joining the cluster and shipping verlenv to it, beyond the nodes' own time
ALLREDUCE_S = 1020  # allreduce.run's bounds: its ranks start, rank 0 opens its store (300 s each), the reduce (360 s)
TRAINER_S = 1800  # cluster/trainer.py's BUDGET_S: verl's trainer (900 s) and three rounds of tasks on every node
UNREACHABLE = 3  # the driver's exit code when the cluster's address does not answer
STOP_S = 30  # a stopped driver's time to stop its node tasks and clean up before it is killed


def run_driver(python: str, spec: dict, timeout: float, connect_s: float = CONNECT_S) -> dict:
    """Run the driver in the env's interpreter with only the verlenv package added to its path. It must join the
    cluster within connect_s (an address where something answers that never lets it in is named, not waited on);
    a signal to this process (Ctrl-C, SIGTERM) stops the driver, which stops its node tasks, and removes the temp
    folder here."""
    with tempfile.TemporaryDirectory(prefix="verlenv-ray-") as tmp:
        (Path(tmp) / "verlenv").symlink_to(PACKAGE_DIR)
        request, out, connected = Path(tmp) / "request.json", Path(tmp) / "cluster.json", Path(tmp) / "connected"
        request.write_text(json.dumps({**spec, "connected": str(connected)}))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tmp, *filter(None, [os.environ.get("PYTHONPATH")])])}
        proc = subprocess.Popen([python, "-m", "verlenv.cluster.driver", str(request), str(out)], env=env,
                                stdout=subprocess.PIPE, stderr=None, text=True, start_new_session=True)
        address = spec["options"].get("ray") or "auto"
        try:
            stdout = _wait(proc, connected, timeout, connect_s, address)
        except BaseException:
            _stop(proc)
            raise
        if proc.returncode == UNREACHABLE and stdout.strip():
            raise UserError(stdout.strip().splitlines()[-1])
        if proc.returncode != 0 or not out.exists():
            raise UserError(f"--ray: the Ray driver failed (exit {proc.returncode}) on "
                            f"{address!r}; is a Ray cluster of this env running there (`ray status`)?")
        return json.loads(out.read_text())


def _wait(proc: subprocess.Popen, connected: Path, timeout: float, connect_s: float, address: str) -> str:
    """The driver's output once it exits; UserError when it has not joined the cluster within connect_s (while it
    still runs) or has not finished within timeout."""
    start = time.monotonic()
    while not connected.exists():
        try:
            return proc.communicate(timeout=0.5)[0]  # it ended before joining: its exit code says why
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() - start > connect_s:
            _stop(proc)
            raise UserError(f"--ray {address}: joined no Ray cluster within {connect_s:.0f} s (something answers "
                            "there, but not a Ray cluster of this Ray version?)")
    try:
        return proc.communicate(timeout=max(1.0, timeout - (time.monotonic() - start)))[0]
    except subprocess.TimeoutExpired:
        _stop(proc)
        raise UserError(f"--ray: the Ray driver did not finish within {timeout:.0f} s") from None


def _stop(proc: subprocess.Popen) -> None:
    """The driver and its process group: asked to stop (it stops its node tasks), killed after STOP_S."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def statuses(row: dict) -> dict[str, str]:
    """check (or probe) -> its status on this node."""
    if "probes" in row:
        return {p["probe"]: p["status"] for p in row["probes"]}
    return {r["name"]: r["status"] for r in row.get("results", [])}


def verify_cluster(cat: stacks.Catalog, variant: stacks.Variant, python: str, lock: Path | None,
                   options: VerifyOptions, families: list[dict], runtime_env: dict, report: Path,
                   command: list[str]) -> int:
    """Verify every node of the cluster at options.ray, then (unless options.skip_cluster_trainer) run verl's
    trainer across it; write the JSON report to `report` (checked writable by the caller; the temp folder if it
    fails after all), print the tables, return the exit code. The node options (thorough, families, TP sizes...)
    apply to every node's checks and to the cluster's trainer alike."""
    started = datetime.now(timezone.utc)
    spec = {"options": options.to_json(), "runtime_env": runtime_env, "catalog": str(cat.root / "stacks.toml"),
            "lock": str(lock.absolute()) if lock else None, "families": families,
            "trainer_log": str(report.absolute().with_name(report.stem + ".trainer.log"))}
    address = options.ray or "auto"
    print(f"verlenv verify --ray {address}: {variant.key}, driver {python}", file=sys.stderr, flush=True)
    data = run_driver(python, spec, options.node_timeout + CONNECT_S + ALLREDUCE_S
                      + (0 if options.skip_cluster_trainer else TRAINER_S))
    data = {"schema_version": 1, "command": command,
            "timestamp": started.isoformat(timespec="seconds"), "stack": variant.stack.name, "variant": variant.name,
            "mode": options.mode, "options": options.to_json(), "families": [f["name"] for f in families],
            "lock": {"path": str(lock), "sha256": sha256_file(lock)} if lock else None, **data}
    data["exit_code"] = exit_code(data)
    data["result"] = "pass" if data["exit_code"] == 0 else "fail"
    data["wall_seconds"] = round((datetime.now(timezone.utc) - started).total_seconds(), 2)
    written = write_or_fallback(report, json.dumps(data, indent=1) + "\n", "--report", started)
    print_report(data)
    print(f"report: {written}", file=sys.stderr)
    return data["exit_code"] if written == report else 2


def write_or_fallback(path: Path, text: str, option: str, started: datetime) -> Path:
    """Write a report where asked; if that fails after all (disk full, a folder gone), write it to the temp folder
    and say where: a finished run's results are never lost."""
    try:
        write_atomic(path, text)
        return path
    except OSError as e:
        fallback = (Path(tempfile.gettempdir())
                    / f"verlenv-{started.strftime('%Y%m%dT%H%M%SZ')}-{os.getpid()}-{Path(path).name}")
        write_atomic(fallback, text)
        print(f"verlenv verify: {option} {path}: cannot write it ({e.strerror}); the report is at {fallback}",
              file=sys.stderr)
        return fallback


def doctor_cluster(cat: stacks.Catalog, variant: stacks.Variant, python: str, lock: Path, *, address: str,
                   probes: list[str] | None, node_timeout: float) -> dict:
    """The doctor's probes on every node of the cluster at `address`, and the fingerprint differences."""
    options = VerifyOptions(stack=variant.stack.name, variant=variant.name, ray=address, node_timeout=node_timeout,
                            allreduce="off")
    spec = {"what": "doctor", "options": options.to_json(), "catalog": str(cat.root / "stacks.toml"),
            "lock": str(lock.absolute()), "probes": probes}
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
