"""A torch.distributed all-reduce across nodes: one Ray actor per GPU (or per node, for gloo on CPU nodes),
rendezvous at a store rank 0 holds on its node's address as Ray reports it, an exact-sum check on every rank, then
bus bandwidth.

Three steps, each with its own bound, so a failure says which rank, on which node, at which step: every rank's actor
starts and imports torch (a new worker process each, which a busy node may be slow to start); rank 0 opens the
store; the ranks meet there and reduce. The first rank that fails is reported at once; the others are not waited for."""

import datetime
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from verlenv.verify.kernels import _common

SIZES = {"nccl": (2**21, 2**25, 2**29),  # bytes; 512 MiB is where NCCL reaches its bus bandwidth
         "gloo": (2**20, 2**24)}  # CPU nodes: proves the path, not the network
ELEMENTS = 1 << 20  # of the exact-sum pattern
# The driver waits this much beyond the ranks' own torch.distributed timeout, so that a rank stuck in the rendezvous
# or a collective ends with torch's own error (what it waited for), not with the driver's bare timeout.
DRIVER_GRACE_S = 60


def expected_sum(world: int) -> int:
    """Rank r contributes (r + 1) times the pattern, so the reduced sum is world(world+1)/2 times it."""
    return world * (world + 1) // 2


class Rank:
    """One process of the all-reduce, pinned to a node (and, for NCCL, given one GPU by Ray)."""

    def ready(self) -> bool:
        """Up, with torch imported: seconds of CPU that would otherwise count against the rendezvous's bound, while
        the ranks already there wait."""
        import torch.distributed  # noqa: F401

        return True

    def open_store(self, world: int, timeout_s: float) -> tuple[str, int]:
        """Rank 0's rendezvous store, held by this actor on a port the kernel gives it: a port found free, released
        and bound again later may be taken in between."""
        import torch.distributed as dist

        host = ray.util.get_node_ip_address()
        self.store = dist.TCPStore(host, 0, world, is_master=True, timeout=datetime.timedelta(seconds=timeout_s),
                                   wait_for_workers=False)
        return host, self.store.port

    def run(self, rank: int, world: int, host: str, port: int, backend: str, sizes: tuple[int, ...],
            timeout_s: float) -> dict:
        import torch
        import torch.distributed as dist

        cuda = backend == "nccl"
        device = torch.device("cuda", 0) if cuda else torch.device("cpu")  # Ray shows the actor its one GPU as 0
        if cuda:
            torch.cuda.set_device(device)
        timeout = datetime.timedelta(seconds=timeout_s)
        store = self.store if rank == 0 else dist.TCPStore(host, port, world, is_master=False, timeout=timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
        try:
            pattern = torch.arange(ELEMENTS, device=device, dtype=torch.float32).remainder_(1000)  # exact in fp32
            x = pattern * (rank + 1)
            dist.all_reduce(x)
            wrong = torch.tensor([int((x != pattern * expected_sum(world)).sum().item())], device=device)
            dist.all_reduce(wrong)
            rows = []
            for nbytes in sizes:
                buf = torch.randn(nbytes // 2, device=device, dtype=torch.bfloat16 if cuda else torch.float16)
                times = (_common.cuda_times_ms(torch, lambda buf=buf: dist.all_reduce(buf), 5, 20) if cuda
                         else _wall_times_ms(lambda buf=buf: dist.all_reduce(buf), 1, 3))
                stats = _common.timing_stats(times)
                rows.append({"bytes": nbytes, **stats, "algbw_gbps": _common.algbw_gbps(nbytes, stats["median_ms"]),
                             "busbw_gbps": _common.busbw_gbps(nbytes, stats["median_ms"], world)})
            version = torch.cuda.nccl.version() if cuda else None
            return {"rank": rank, "node": ray.get_runtime_context().get_node_id(), "wrong_elements": int(wrong.item()),
                    "elements": ELEMENTS * world, "rows": rows,
                    "nccl": ".".join(map(str, version)) if isinstance(version, tuple) else version}
        finally:
            dist.destroy_process_group()


def _wall_times_ms(fn, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def run(places: list[tuple[str, int]], backend: str = "nccl", timeout_s: float = 300,
        names: dict[str, str] | None = None) -> dict:
    """All-reduce over `places` [(node id, ranks there)]; one result dict, `ok` false with `error` on failure.
    `names` (node id -> the name the report gives it) words the errors."""
    gpu = 1 if backend == "nccl" else 0
    nodes = [node_id for node_id, count in places for _ in range(count)]  # rank -> its node
    ranks = [ray.remote(num_gpus=gpu, num_cpus=0, max_restarts=0)(Rank).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote() for node_id in nodes]
    world = len(ranks)
    start = time.monotonic()
    try:
        wait_ranks([r.ready.remote() for r in ranks], timeout_s, nodes, names, "start")
        [(host, port)] = wait_ranks([ranks[0].open_store.remote(world, timeout_s)], timeout_s, nodes, names,
                                    "open the store")
        done = wait_ranks([r.run.remote(i, world, host, port, backend, SIZES[backend], timeout_s)
                           for i, r in enumerate(ranks)], timeout_s + DRIVER_GRACE_S, nodes, names, "finish")
    except RankFailed as e:
        return {"ok": False, "backend": backend, "world": world, "error": str(e),
                "seconds": round(time.monotonic() - start, 2)}
    finally:
        for r in ranks:
            ray.kill(r)
    wrong = done[0]["wrong_elements"]
    return {"ok": wrong == 0, "backend": backend, "world": world, "nodes": len({d["node"] for d in done}),
            "wrong_elements": wrong, "elements": done[0]["elements"], "nccl": done[0]["nccl"], "rows": done[0]["rows"],
            "seconds": round(time.monotonic() - start, 2),
            **({} if wrong == 0 else {"error": f"{wrong} of {done[0]['elements']} elements not the exact sum"})}


class RankFailed(Exception):
    """A rank that failed, or ranks that did not get through a step in time."""


def wait_ranks(refs: list, timeout_s: float, nodes: list[str], names: dict[str, str] | None, step: str) -> list:
    """The ranks' results in rank order; raises RankFailed at the first rank that fails, or naming those that did not
    `step` within timeout_s."""
    index = {ref: i for i, ref in enumerate(refs)}
    results: dict[int, object] = {}
    pending = list(refs)
    deadline = time.monotonic() + timeout_s
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            late = sorted(index[ref] for ref in pending)
            raise RankFailed(f"{_ranks(late, nodes, names)} did not {step} within {timeout_s:g} s")
        i = index[ready[0]]
        try:
            results[i] = ray.get(ready[0])
        except Exception as e:  # the rank's own error (its task raised) or Ray's (its actor died, or cannot be placed)
            raise RankFailed(f"{_ranks([i], nodes, names)} failed to {step}: {_reason(e)}") from None
    return [results[i] for i in range(len(refs))]


def _ranks(ranks: list[int], nodes: list[str], names: dict[str, str] | None) -> str:
    where = [f"{i} (node {(names or {}).get(nodes[i]) or nodes[i][:12]})" for i in ranks]
    return ("rank " if len(where) == 1 else "ranks ") + ", ".join(where)


def _reason(e: Exception) -> str:
    """One line: the exception a rank raised (Ray wraps it), or Ray's own."""
    cause = getattr(e, "cause", None) or e
    text = " ".join(str(cause).split())
    return f"{type(cause).__name__}: {text}"[:400]
