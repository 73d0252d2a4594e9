"""The files of one node in a Ray session's log folder (`session_latest/logs`), where run-time failures are written.

On a real cluster each host has its own folder and every file in it is that node's. Several nodes started on one
host (`ray start` twice, as tests/ray_nodes.py does) share one folder: each raylet numbers its own files
(raylet.1.out, dashboard_agent.1.log) and logs the pid of every worker it starts, so a node's files are its
numbered ones and its workers'; the unnumbered rest (gcs_server, dashboard, drivers) go to the node whose raylet
is the unnumbered one (the first started on the host, the head when there is one).
"""

import re
from pathlib import Path

from verlenv.doctor import tree

_ROTATED = r"(?:\.\d+)?"
RAYLET_OUT = re.compile(rf"^raylet(?:\.(?P<index>\d+))?\.out{_ROTATED}$")
NUMBERED = re.compile(rf"^[a-z_]+\.(?P<index>\d+)\.(?:out|err|log){_ROTATED}$")
WORKER_FILE = re.compile(rf"^(?:worker-[0-9a-f]+-[0-9a-f]+-|python-core-(?:worker|driver)-[0-9a-f]+_)(?P<pid>\d+)"
                         rf"\.(?:out|err|log){_ROTATED}$")
STARTED_WORKER = re.compile(rb"Started worker process with pid (\d+)")
# A raylet names its own node first ("Setting node ID node_id=..."); later lines name the other nodes as they join.
OWN_NODE_ID = re.compile(rb"node_id=([0-9a-f]+)")
HEAD_BYTES = 1 << 20


def logs_folder_of_this_process() -> Path | None:
    """The session's log folder of the Ray node this process (a Ray worker) runs on; None outside Ray."""
    try:
        import ray._private.worker as ray_worker

        node = ray_worker.global_worker.node
        return Path(node.get_logs_dir_path()) if node is not None else None
    except Exception:  # noqa: BLE001  not a Ray worker, or a Ray without this internal API: no folder
        return None


def _raylet_index(name: str) -> str | None:
    m = RAYLET_OUT.match(name)
    return (m.group("index") or "") if m else None


def node_files(folder: Path, node_id: str) -> list[Path]:
    """The files of `folder` that belong to the node `node_id` (all of them when the folder is one node's)."""
    files = list(tree.files_under(folder))
    raylets: dict[str, list[Path]] = {}
    for f in files:
        if (index := _raylet_index(f.name)) is not None:
            raylets.setdefault(index, []).append(f)
    if len(raylets) <= 1:
        return files
    mine = next((index for index, paths in raylets.items() if any(_names(p, node_id) for p in paths)), None)
    if mine is None:
        return files  # this node's raylet log is gone (rotated away): read everything rather than nothing
    pids = {index: {int(p) for path in paths for p in _started_pids(path)} for index, paths in raylets.items()}
    others = set().union(*(p for index, p in pids.items() if index != mine))
    return [f for f in files if _belongs(f.name, mine, pids[mine], others)]


def _belongs(name: str, mine: str, my_pids: set[int], other_pids: set[int]) -> bool:
    if (index := _raylet_index(name)) is not None:
        return index == mine
    if m := NUMBERED.match(name):
        return m.group("index") == mine
    if m := WORKER_FILE.match(name):
        pid = int(m.group("pid"))
        if pid in my_pids or pid in other_pids:
            return pid in my_pids
    return mine == ""  # the host's shared files: read once, by the unnumbered raylet's node


def _names(raylet_log: Path, node_id: str) -> bool:
    """The raylet that wrote this log is node `node_id` (its first node id is its own)."""
    try:
        with open(raylet_log, "rb") as f:
            m = OWN_NODE_ID.search(f.read(HEAD_BYTES))
    except OSError:
        return False
    return bool(m) and m.group(1).decode() == node_id


def _started_pids(raylet_log: Path) -> list[bytes]:
    try:
        return STARTED_WORKER.findall(raylet_log.read_bytes())
    except OSError:
        return []
