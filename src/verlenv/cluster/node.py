"""What runs on each node, inside a Ray worker of the node's own env: verify's checks and the fingerprint."""

import os
import platform
import socket
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from verlenv import catalog, gpus
from verlenv.cluster import fingerprint
from verlenv.errors import UserError
from verlenv.verify import runner


@dataclass
class Request:
    """What every node checks against: the driver's catalog and lock, shipped to nodes that have neither."""

    catalog: catalog.Catalog
    stack: str | None
    variant: str
    lock_name: str | None
    lock_text: str | None
    gpu: str = "auto"
    force: bool = False
    skipped: frozenset[str] = frozenset()
    only: str | None = None
    timeout: float = 150.0
    probes: list[str] | None = None  # doctor: only these probes
    thorough: bool = False  # verify's --thorough, --rollout-tp, --actor-tp: as on one node
    rollout_tp: int = 1
    actor_tp: int = 1


def check(request: Request) -> dict:
    """Verify the env this worker runs in (its own interpreter) on this node; never raises for a failed check."""
    start = time.monotonic()
    visible = gpus.gpu_details()
    node = {"hostname": socket.gethostname(), "ip": _ip(), "pid": os.getpid(), "python": sys.executable,
            "platform": platform.platform(), "gpus": [g.name for g in visible]}
    variant = request.catalog.variant(request.stack, request.variant)
    # A node without GPUs (often the head) gets the static checks, as `--gpu auto` would give it, unless forced.
    requested = request.gpu if visible or request.force else "auto"
    try:
        profile = gpus.select_profile(requested, visible, request.force)
    except UserError as e:
        return {"node": node, "error": str(e), "fingerprint": fingerprint.compute(visible), "results": [],
                "seconds": round(time.monotonic() - start, 2)}
    # The fingerprint mostly waits on torch importing in its own process: it runs beside the checks.
    with tempfile.TemporaryDirectory(prefix="verlenv-cluster-") as tmp, ThreadPoolExecutor(max_workers=1) as pool:
        facts = pool.submit(_timed, fingerprint.compute, visible)
        lock = None
        if request.lock_text is not None:
            lock = Path(tmp) / (request.lock_name or "lock.txt")
            lock.write_text(request.lock_text)
        settings = runner.Settings(python=sys.executable, catalog=request.catalog, variant=variant, profile=profile,
                                   gpus=visible, lock=lock, no_lock=request.lock_text is None,
                                   skipped=request.skipped, only=request.only, timeout=request.timeout,
                                   thorough=request.thorough, rollout_tp=request.rollout_tp, actor_tp=request.actor_tp)
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
    """`verlenv doctor`'s probes of the env this worker runs in, on this node, and the fingerprint."""
    from verlenv.doctor import facts, probes

    start = time.monotonic()
    visible = gpus.gpu_details()
    node = {"hostname": socket.gethostname(), "ip": _ip(), "pid": os.getpid(), "python": sys.executable,
            "platform": platform.platform(), "gpus": [g.name for g in visible]}
    with tempfile.TemporaryDirectory(prefix="verlenv-cluster-") as tmp:
        lock = None
        if request.lock_text is not None:
            lock = Path(tmp) / (request.lock_name or "lock.txt")
            lock.write_text(request.lock_text)
        results = probes.run_all(facts.gather(sys.executable), lock=lock, only=request.probes)
    return {"node": node, "fingerprint": fingerprint.compute(visible), "probes": [r.to_dict() for r in results],
            "seconds": round(time.monotonic() - start, 2)}


def _ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # outside Ray (tests of this function): the host's name is all there is
        return socket.gethostname()
