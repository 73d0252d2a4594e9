"""GPU checks of NCCL through torch.distributed: one process per local GPU all-reduces a known pattern (checked
exactly on every rank), then bus bandwidth for 2 MiB .. 512 MiB. With one GPU the all-reduce still runs
(NCCL initialises), but bandwidth means nothing.

Thresholds: nccl_min_busbw_gbs_<n>gpu (bus bandwidth floor at 512 MiB for n GPUs; no floor where unset).
Run: python check_nccl.py --out results.json --profile '{"key": "h100", "arch": "9.0", "fp8": true}'
"""

import datetime
import json
import os
import sys
import tempfile
import time

import _common

PACKAGE = "nccl"
SIZES = (2**21, 2**25, 2**29)  # bytes
TIMEOUT_S = 240
# The lent multi-GPU machines need NVLink multicast off; set in every process before NCCL starts.
CHILD_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def expected_sum(world: int) -> int:
    """Rank r contributes (r + 1) times the pattern, so the all-reduced sum is world(world+1)/2 times it."""
    return world * (world + 1) // 2


def worker(rank, world, port, result_path):
    os.environ.update(CHILD_ENV)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        device = torch.device("cuda", rank)
        pattern = torch.arange(1 << 20, device=device, dtype=torch.float32).remainder_(1000)  # exact in fp32
        x = pattern * (rank + 1)
        dist.all_reduce(x)
        wrong = torch.tensor([int((x != pattern * expected_sum(world)).sum().item())], device=device)
        dist.all_reduce(wrong)
        rows = []
        for nbytes in SIZES:
            buf = torch.randn(nbytes // 2, device=device, dtype=torch.bfloat16)
            stats = _common.timing_stats(_common.cuda_times_ms(torch, lambda buf=buf: dist.all_reduce(buf), 5, 20))
            rows.append({"bytes": nbytes, **stats,
                         "algbw_gbps": _common.algbw_gbps(nbytes, stats["median_ms"]),
                         "busbw_gbps": _common.busbw_gbps(nbytes, stats["median_ms"], world),
                         "best_busbw_gbps": _common.busbw_gbps(nbytes, stats["min_ms"], world)})
        if rank == 0:
            version = torch.cuda.nccl.version()
            with open(result_path, "w") as f:
                json.dump({"world": world, "wrong_elements": int(wrong.item()), "elements": x.numel() * world,
                           "nccl": ".".join(map(str, version)) if isinstance(version, tuple) else str(version),
                           "rows": rows}, f)
    finally:
        dist.destroy_process_group()


def run_all_reduce(torch, world):
    import torch.multiprocessing as mp

    os.environ.update(CHILD_ENV)
    with tempfile.TemporaryDirectory(prefix="verlenv-nccl-") as tmp:
        result_path = os.path.join(tmp, "result.json")
        context = mp.start_processes(worker, args=(world, _common.free_port(), result_path), nprocs=world,
                                     join=False, start_method="spawn")
        deadline = time.monotonic() + TIMEOUT_S
        while not context.join(timeout=5):
            if time.monotonic() > deadline:
                for process in context.processes:
                    if process.is_alive():
                        process.kill()
                raise _common.Failed(f"all-reduce over {world} GPUs did not finish in {TIMEOUT_S} s "
                                     "(NCCL init or a collective hung)")
        with open(result_path) as f:
            return json.load(f)


def check_exact(torch, state):
    world = torch.cuda.device_count()
    state["result"] = result = run_all_reduce(torch, world)
    numbers = {"world": world, "wrong_elements": result["wrong_elements"], "elements": result["elements"]}
    problems = []
    if result["wrong_elements"]:
        problems.append(f"{result['wrong_elements']} of {result['elements']} all-reduced elements are wrong")
    return _common.verdict(numbers, problems, f"NCCL {result['nccl']}, {world} GPU(s), fp32 sum checked exactly")


def check_bandwidth(profile, state):
    if "result" not in state:
        raise _common.Failed("the all-reduce did not run (see nccl/all-reduce/exact)")
    result = state["result"]
    numbers = {"world": result["world"]}
    print(f"{'size':>10} {'time ms':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}")
    for row in result["rows"]:
        label = f"{row['bytes'] // 2**20}MiB"
        print(f"{label:>10} {row['median_ms']:10.3f} {row['algbw_gbps']:11.1f} {row['busbw_gbps']:11.1f}")
        numbers[f"{label}_median_ms"] = row["median_ms"]
        numbers[f"{label}_busbw_gbps"] = row["busbw_gbps"]
    if result["world"] == 1:
        return numbers, "one GPU: NCCL initialised and the all-reduce ran; bus bandwidth is not meaningful"
    largest = result["rows"][-1]
    # Beside another GPU job (verl's trainer in the fast proof) the median shares the GPU: the fastest of the
    # all-reduces is judged, which a load beside slows only if it slows every one.
    numbers[f"{largest['bytes'] // 2**20}MiB_best_busbw_gbps"] = largest["best_busbw_gbps"]
    if profile.beside:
        judged, how = largest["best_busbw_gbps"], f"best of {largest['repeats']}, beside {', '.join(profile.beside)}"
    else:
        judged, how = largest["busbw_gbps"], f"median of {largest['repeats']}"
    note = f"{judged:.0f} GB/s bus bandwidth at {largest['bytes'] // 2**20} MiB, bf16 ({how})"
    key = f"nccl_min_busbw_gbs_{result['world']}gpu"
    floor = profile.optional_threshold(key)
    if floor is None:
        return numbers, f"{note}; profile {profile.key!r} sets no {key}"
    problems = []
    if not _common.at_least(judged, floor):
        problems.append(f"{judged:.0f} GB/s bus bandwidth at {largest['bytes'] // 2**20} MiB ({how}) is "
                        f"below the floor of {floor:.0f} (PCIe path instead of NVLink?)")
    return _common.verdict(numbers, problems, f"{note} (floor {floor:.0f})")


def checks(profile, torch):
    state = {}
    return [
        ("nccl/all-reduce/exact", lambda: check_exact(torch, state)),
        ("nccl/all-reduce/busbw", lambda: check_bandwidth(profile, state)),
    ]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"torch": "torch"}, checks))
