"""A torch.distributed all-reduce across nodes: one Ray actor per GPU (or per node, for gloo on CPU nodes),
rendezvous at rank 0's address as Ray reports it, an exact-sum check on every rank, then bus bandwidth."""

import datetime
import socket
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from verlenv.verify.kernels import _common

SIZES = {"nccl": (2**21, 2**25, 2**29),  # bytes; 512 MiB is where NCCL reaches its bus bandwidth
         "gloo": (2**20, 2**24)}  # CPU nodes: proves the path, not the network
ELEMENTS = 1 << 20  # of the exact-sum pattern


def expected_sum(world: int) -> int:
    """Rank r contributes (r + 1) times the pattern, so the reduced sum is world(world+1)/2 times it."""
    return world * (world + 1) // 2


class Rank:
    """One process of the all-reduce, pinned to a node (and, for NCCL, given one GPU by Ray)."""

    def address(self) -> tuple[str, int]:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def run(self, rank: int, world: int, host: str, port: int, backend: str, sizes: tuple[int, ...],
            timeout_s: float) -> dict:
        import torch
        import torch.distributed as dist

        cuda = backend == "nccl"
        device = torch.device("cuda", 0) if cuda else torch.device("cpu")  # Ray shows the actor its one GPU as 0
        if cuda:
            torch.cuda.set_device(device)
        dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
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


def run(places: list[tuple[str, int]], backend: str = "nccl", timeout_s: float = 300) -> dict:
    """All-reduce over `places` [(node id, ranks there)]; one result dict, `ok` false with `error` on failure."""
    gpu = 1 if backend == "nccl" else 0
    ranks = [ray.remote(num_gpus=gpu, num_cpus=0, max_restarts=0)(Rank).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()
        for node_id, count in places for _ in range(count)]
    world = len(ranks)
    start = time.monotonic()
    try:
        host, port = ray.get(ranks[0].address.remote(), timeout=timeout_s)
        refs = [r.run.remote(i, world, host, port, backend, SIZES[backend], timeout_s) for i, r in enumerate(ranks)]
        done = ray.get(refs, timeout=timeout_s)
    except Exception as e:  # a rank that died, hung or could not start: the all-reduce as a whole failed
        return {"ok": False, "backend": backend, "world": world, "error": f"{type(e).__name__}: {str(e).strip()[:400]}",
                "seconds": round(time.monotonic() - start, 2)}
    finally:
        for r in ranks:
            ray.kill(r)
    wrong = done[0]["wrong_elements"]
    return {"ok": wrong == 0, "backend": backend, "world": world, "nodes": len({d["node"] for d in done}),
            "wrong_elements": wrong, "elements": done[0]["elements"], "nccl": done[0]["nccl"], "rows": done[0]["rows"],
            "seconds": round(time.monotonic() - start, 2),
            **({} if wrong == 0 else {"error": f"{wrong} of {done[0]['elements']} elements not the exact sum"})}
