"""A real multi-node Ray cluster on one machine, for the cluster tests and benchmarks: `ray start` per node, each
node on its own loopback address (127.0.0.N), possibly from its own venv and environment, one CPU each, no
dashboard; stopped by killing exactly the processes of this cluster (never `ray stop`, which stops every
cluster of the machine)."""

import itertools
import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 600  # a hang guard for one `ray start`
START_TRIES = 3
ALIVE_GUARD_S = 600  # a hang guard: nodes that never come up fail the start after it
OBJECT_STORE_BYTES = 100 * 1024 * 1024  # the plasma store's floor is 75 MiB; nothing big travels
LOCK = Path(__file__).resolve().parents[1] / "locks" / "verl-0.9-fsdp.linux-64.txt"  # the default env's
COMMON = ("--num-cpus", "1", "--object-store-memory", str(OBJECT_STORE_BYTES), "--disable-usage-stats")
# The worker nodes share the head's session folder on this one host, and the head's log monitor forwards every
# worker's output from it: Ray asks for one log monitor per physical host ("to avoid log duplication on the
# driver", `ray start --help`). One per node sent each line once per node and took about 13 s of CPU each.
WORKER = ("--include-log-monitor", "false")
# Each node's workers bind ports from a block of their own. Every raylet hands out its worker ports from one range
# (Ray's default 10002-19999), checking only that a port is free when it hands it out (ray#8773): two raylets on one
# host that start workers at once can hand out the same port, and the worker that binds second dies at start ("Check
# failed: port_ > 0 ... other processes listening to the port"), which hung a job on the head for 600 s (CI,
# 2026-12-06; doctor F70). Real nodes are separate hosts; here the blocks sit between Ray's default range (which a
# ray.init() of its own, as verl's trainer check starts, takes) and the kernel's ephemeral ports (32768 and up).
WORKER_PORTS_FIRST, WORKER_PORTS_EACH, WORKER_PORTS_BLOCKS = 20000, 400, 31  # 20000-32399
_next_block = itertools.count()


def worker_ports() -> tuple[str, ...]:
    """`ray start` arguments for a new node's block of worker ports (the oldest block again after the last)."""
    first = WORKER_PORTS_FIRST + next(_next_block) % WORKER_PORTS_BLOCKS * WORKER_PORTS_EACH
    return ("--min-worker-port", str(first), "--max-worker-port", str(first + WORKER_PORTS_EACH - 1))


def placed(gpu: str, node: int) -> dict:
    """What a node's environment says about its place in a job, and nothing about the env itself."""
    return {"CUDA_VISIBLE_DEVICES": gpu, "NVIDIA_VISIBLE_DEVICES": gpu, "SLURM_JOB_ID": "4242",
            "SLURM_NODEID": str(node), "SLURM_PROCID": str(node), "SLURM_LOCALID": "0",
            "SLURMD_NODENAME": f"gpu-{node}", "LOCAL_RANK": "0", "RANK": str(node),
            "VLLM_HOST_IP": f"127.0.0.{node + 2}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out[int(entry.name)] = (ppid, cmd)
    return out


def _with_descendants(roots: set[int], procs: dict[int, tuple[int, str]]) -> set[int]:
    found = set(roots)
    while True:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in found and pid not in found}
        if not more:
            return found
        found |= more


@dataclass
class LocalCluster:
    temp_dir: str
    port: int
    python: str  # the head's env, which asks the cluster how many nodes are alive
    workers: list[str] = field(default_factory=list)  # worker nodes' IPs (the head takes the machine's own address)
    ever: int = 0  # worker nodes started so far: the next one takes 127.0.0.(ever + 2)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pids(self, ip: str | None = None) -> set[int]:
        """This cluster's processes (their command lines name its session folder, and `ip` when given), with every
        process they started (Ray's agents and workers)."""
        procs = _processes()
        # Ray's client server names only the head's address, not the session folder.
        ours = (self.temp_dir, f":{self.port} ")  # command lines end with a space (NULs made spaces)
        roots = {pid for pid, (_, cmd) in procs.items() if any(o in cmd for o in ours)
                 and ("ray" in cmd or "gcs_server" in cmd)
                 and (ip is None or f"{ip} " in cmd or f"{ip}:" in cmd or cmd.endswith(ip))}
        return _with_descendants(roots, procs) - {os.getpid()}

    def running(self, ip: str, title: str) -> bool:
        """A process of node `ip` runs a Ray task named `title` now (Ray titles a worker `ray::<task name>`)."""
        procs = _processes()
        return any(procs[pid][1].startswith(f"ray::{title}") for pid in self.pids(ip) if pid in procs)

    def stop_node(self, ip: str) -> set[int]:
        """SIGSTOP every process of node `ip` (the machine hangs), again until no new one appears: a raylet that is
        starting a worker as the first set is stopped leaves a process the first scan did not see."""
        stopped: set[int] = set()
        while pids := self.pids(ip) - stopped:
            _kill(pids, signal.SIGSTOP)
            stopped |= pids
        return stopped

    def kill_node(self, ip: str) -> set[int]:
        """SIGKILL one worker node's raylet, its agents and workers: the machine died."""
        pids = self.pids(ip)
        _kill(pids)
        return pids

    def stop(self) -> None:
        _kill(self.pids())

    def add_worker(self, python: str, extra: dict, args: tuple[str, ...] = ()) -> str:
        """One more worker node (python's env, `extra` in its environment, `args` to its `ray start`); its IP."""
        ip = f"127.0.0.{2 + self.ever}"
        self.ever += 1
        _start(str(Path(python).parent / "ray"),
               ["--address", self.address, "--node-ip-address", ip, *COMMON, *WORKER, *worker_ports(), *args],
               {**_base(), **extra}, self, ip)
        self.workers.append(ip)
        _wait_alive(python, self.address, 1 + len(self.workers))
        return ip

    def remove_worker(self, ip: str) -> None:
        """Take a worker node out as `ray stop` does on its machine: SIGTERM to its raylet, which tells the cluster
        it leaves; once the cluster no longer counts it alive, whatever of it is left is killed."""
        procs = _processes()
        _kill({pid for pid in self.pids(ip) if "raylet/raylet " in procs.get(pid, (0, ""))[1]}, signal.SIGTERM)
        self.workers.remove(ip)
        _wait_alive(self.python, self.address, 1 + len(self.workers))
        _kill(self.pids(ip))


def _kill(pids: set[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _start(ray: str, args: list[str], env: dict, cluster: "LocalCluster | None" = None, ip: str = "") -> None:
    """`ray start`; a worker node whose raylet missed Ray's fixed 30 s to register (a loaded machine) is killed and
    started again, up to START_TRIES times."""
    for attempt in range(1, START_TRIES + 1):
        proc = subprocess.run([ray, "start", *args], env=env, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        if proc.returncode == 0:
            return
        if cluster is None or attempt == START_TRIES or "timed out during startup" not in proc.stdout + proc.stderr:
            raise RuntimeError(f"ray start {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        cluster.kill_node(ip)


def _base() -> dict:
    # A worker process gets 60 s by default to register with its raylet: more than nodes sharing two loaded cores
    # may need.
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_DISABLE_DOCKER_CPU_WARNING": "1",
            "RAY_worker_register_timeout_seconds": "600",
            # A test cluster is healthy whatever this machine's disk holds: Ray's local_fs_capacity_threshold (95%
            # used) would otherwise print its "over 95% full" warning into the session logs that doctor --ray reads
            # (F36) on a nearly full disk. The diagnosis itself is tested on given usage figures
            # (test_doctor_node_probes).
            "RAY_local_fs_capacity_threshold": "1.0",
            # The head's health checks of each raylet: a node that answers none of 5 in a row (1 s apart, 3 s
            # each) is dead, about 20 s after it stopped; with Ray's defaults (3 s apart, 10 s each) the test
            # that stops a node waited about 50 s more for that (test_cluster_ray's hung node: 63.7 s -> 20.2 s).
            # A health check is one RPC the raylet's event loop answers without other work, which a raylet on
            # two loaded cores still does in far less than 3 s (three runs beside a CPU hog: docs/benchmarks).
            "RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "3000",
            "RAY_health_check_failure_threshold": "5",
            # Ray starts its workers at nice 15, so that a node's own daemons stay responsive when the node's work
            # takes every core. Here the work beside them is the rest of the suite, at nice 0, and it starved them:
            # beside two busy loops at nice 0, the three-node gloo all-reduce took 126-157 s and 2 of 6 timed out
            # (75 s a step); at nice 0, 6 of 6 took 8-10 s (benchmarks/allreduce_under_load.py, docs/benchmarks).
            "RAY_worker_niceness": "0"}


def refresh_files_record(python: str) -> None:
    """Leave the env of `python` as `verlenv install` does: its record of the files it found intact (installed_files,
    CHECKED) up to date, hashing only the distributions whose files changed since. Each venv this suite links from
    uv's cache, or removes, changes the link count and so the ctime of the default env's files (the same inodes):
    every node's verify would then hash the env's 10 GB again, three nodes at once on two cores (about 110 s a
    call), to prove what test_installed_files proves on its own."""
    from verlenv.catalog import pins
    from verlenv.env import installed_files

    installed_files.check(python, sorted(pins.read_lock(LOCK)), record=True, reuse=True)


def start(head_python: str, workers: list[tuple], head_env: dict | None = None) -> LocalCluster:
    """A head from head_python's env (head_env added to its environment), then one worker node per (python, extra
    environment[, extra `ray start` arguments]) on 127.0.0.2, .3, ...; each env's record of its intact files up to
    date (refresh_files_record), as install leaves it."""
    for python in dict.fromkeys([head_python, *(python for python, *_ in workers)]):
        refresh_files_record(python)
    temp_dir = tempfile.mkdtemp(prefix="vray")  # short: Ray's socket paths must stay under 108 bytes
    cluster = LocalCluster(temp_dir, free_port(), head_python)
    try:
        _start(str(Path(head_python).parent / "ray"),
               ["--head", "--node-ip-address", "127.0.0.1", "--port", str(cluster.port), "--temp-dir", temp_dir,
                "--include-dashboard", "false", "--dashboard-port", str(free_port()),
                "--ray-client-server-port", str(free_port()), *COMMON, *worker_ports()],
               {**_base(), **(head_env or {})})
        # One at a time: a raylet has 30 s to register, which parallel starts on a small machine exceed.
        for i, (python, extra, *args) in enumerate(workers, start=2):
            _start(str(Path(python).parent / "ray"),
                   ["--address", cluster.address, "--node-ip-address", f"127.0.0.{i}", *COMMON, *WORKER,
                    *worker_ports(), *(args[0] if args else ())],
                   {**_base(), **extra}, cluster, f"127.0.0.{i}")
        cluster.workers += [f"127.0.0.{i}" for i in range(2, 2 + len(workers))]
        cluster.ever = len(workers)
        _wait_alive(head_python, cluster.address, 1 + len(workers))
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_alive(python: str, address: str, count: int, timeout: float = ALIVE_GUARD_S) -> None:
    code = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
            "print(sum(n['Alive'] for n in ray.nodes()))")
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run([python, "-c", code, address], capture_output=True, text=True, timeout=timeout).stdout
        if out.strip() == str(count):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {out.strip() or 0} of {count} Ray nodes alive after {timeout:.0f} s")
        time.sleep(2)
