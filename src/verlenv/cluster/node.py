"""What runs on each node, inside a Ray worker of the node's own env: verify's checks and the fingerprint."""

import os
import platform
import socket
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from verlenv.catalog import gpus, stacks
from verlenv.cluster import fingerprint
from verlenv.errors import UserError
from verlenv.verify import runner
from verlenv.verify.options import VerifyOptions


@dataclass
class Request:
    """What every node checks against: the driver's catalog and lock, shipped to nodes that have neither, the run's
    options (VerifyOptions.to_json of its node part) and the family rows verl's trainer check trains."""

    catalog: stacks.Catalog
    options: dict
    lock_name: str | None
    lock_text: str | None
    families: list[dict] = field(default_factory=list)
    probes: list[str] | None = None  # doctor: only these probes

    @property
    def verify_options(self) -> VerifyOptions:
        return VerifyOptions.from_json(self.options)


def check(request: Request) -> dict:
    """Verify the env this worker runs in (its own interpreter) on this node; never raises for a failed check."""
    start = time.monotonic()
    visible = gpus.gpu_details()
    options = request.verify_options
    node = {"hostname": socket.gethostname(), "ip": _ip(), "pid": os.getpid(), "python": sys.executable,
            "platform": platform.platform(), "gpus": [g.name for g in visible]}
    variant = request.catalog.variant(options.stack, options.variant)
    builds = [b.name for b in variant.source_builds]
    # A node without GPUs (often the head) gets the static checks, as `--gpu auto` would give it, unless forced.
    requested = options.gpu if visible or options.force else "auto"
    try:
        profile = gpus.select_profile(requested, visible, options.force)
    except UserError as e:
        return {"node": node, "error": str(e), "fingerprint": fingerprint.compute(visible, source_builds=builds),
                "results": [], "seconds": round(time.monotonic() - start, 2)}
    # The fingerprint mostly waits on torch importing in its own process: it runs beside the checks.
    with tempfile.TemporaryDirectory(prefix="verlenv-cluster-") as tmp, ThreadPoolExecutor(max_workers=1) as pool:
        facts = pool.submit(_timed, fingerprint.compute, visible, None, builds)
        lock = None
        if request.lock_text is not None:
            lock = Path(tmp) / (request.lock_name or "lock.txt")
            lock.write_text(request.lock_text)
        settings = runner.Settings.from_options(options.replace(no_lock=request.lock_text is None),
                                                python=sys.executable, cat=request.catalog, variant=variant,
                                                profile=profile, visible=visible, lock=lock,
                                                families_rows=request.families)
        run = runner.verify(settings)
        fp, fp_seconds = facts.result()
    return {"node": node, "profile": profile.key if profile else None, "driver": run.driver, "fingerprint": fp,
            "results": [r.to_dict() for r in run.results], "exit_code": run.exit_code,
            "verify_seconds": run.seconds, "fingerprint_seconds": fp_seconds,
            "seconds": round(time.monotonic() - start, 2)}


def _timed(fn, *args):
    start = time.monotonic()
    return fn(*args), round(time.monotonic() - start, 2)


def doctor(request: Request) -> dict:
    """`verlenv doctor`'s probes of the env this worker runs in, on this node; what the node's own Ray session logs
    hold (each finding with its fix checked against this env); and the fingerprint."""
    from verlenv.doctor import facts, probes

    start = time.monotonic()
    visible = gpus.gpu_details()
    node = {"hostname": socket.gethostname(), "ip": _ip(), "pid": os.getpid(), "python": sys.executable,
            "platform": platform.platform(), "gpus": [g.name for g in visible]}
    env_facts = facts.gather(sys.executable)
    with tempfile.TemporaryDirectory(prefix="verlenv-cluster-") as tmp:
        lock = None
        if request.lock_text is not None:
            lock = Path(tmp) / (request.lock_name or "lock.txt")
            lock.write_text(request.lock_text)
        results = probes.run_all(env_facts, lock=lock, only=request.probes)
    session = session_logs(env_facts)
    options = request.verify_options
    builds = [b.name for b in request.catalog.variant(options.stack, options.variant).source_builds]
    return {"node": node, "fingerprint": fingerprint.compute(visible, source_builds=builds),
            "probes": [r.to_dict() for r in results], "logs": session, "seconds": round(time.monotonic() - start, 2)}


def session_logs(env_facts) -> dict:
    """The findings in this node's own files of its Ray session folder, each with its fix checked here."""
    from verlenv.doctor import logs, probes, ray_session

    folder = ray_session.logs_folder_of_this_process()
    if folder is None or not folder.is_dir():
        return {"folder": None, "skipped": "no Ray session log folder for this worker"}
    try:
        import ray

        node_id = ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001  Ray's runtime context missing: every file of the folder is read
        node_id = ""
    files = ray_session.node_files(folder, node_id) if node_id else None
    reading = logs.diagnose_dir(folder, files=files)
    checks = probes.check_findings(reading.diagnoses, env_facts)
    return {"folder": str(folder), "source": reading.source, "files": len(files) if files is not None else None,
            "diagnoses": [_finding(d, checks.get(d.id, [])) for d in reading.diagnoses],
            "notes": len(reading.notes)}


def _finding(d, checks) -> dict:
    """A log finding for the cluster report: the family, its severity, where, the fix, the checks on this node."""
    shown = [{"file": e.file, "lines": [e.first, e.last], "text": e.text[:300]} for e in d.evidence[:3]]
    return {"id": d.id, "title": d.failure.title, "severity": d.severity, "matched": d.count, "evidence": shown,
            "fix": list(d.failure.fix), "checks": [r.to_dict() for r in checks]}


def _ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # outside Ray (tests of this function): the host's name is all there is
        return socket.gethostname()
