"""Two verl jobs' weight syncs at once on one host, through verl 0.9.1's own BucketedWeightSender and
BucketedWeightReceiver (verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py), on the CPU: each job's trainer
sends its weights to its rollout over the ZMQ socket path verl names by the Ray job id
(rl-colocate-zmq-{job}-replica-0-rank-0.sock).

  shared:   both jobs with job id 01000000 (each in a fresh Ray of its own: two plain `main_ppo` runs, or verify's
            side-by-side trainers before 2026-12-08); job B's sender binds while job A's is bound
  distinct: the same, with the ids verify now gives them (1000 and 1001)

For each: which senders and receivers finished within --timeout seconds, and whose weights each rollout got.
The trainer's GPU is the one thing missing here: its weights go through shared memory (verl's use_shm path, as on NPUs),
and verl's device layer is a stand-in with no-op synchronize/empty_cache (named CpuDevice below). The socket paths are
in a folder of their own, never /tmp's (a real run's socket there must not be touched).

Run with the default env's python (verl, pyzmq, torch):
    .venv-verl-0.9-fsdp/bin/python benchmarks/weight_sync_socket.py --out docs/benchmarks/weight-sync-socket-cpu.json
"""

import argparse
import asyncio
import json
import os
import tempfile
import threading
import time

import torch
from verl.workers.rollout.vllm_rollout import bucketed_weight_transfer as transfer


class CpuDevice:
    """Stand-in for verl's CUDA device layer (verl.utils.device.get_torch_device) on a machine without a GPU."""

    @staticmethod
    def synchronize():
        pass

    @staticmethod
    def empty_cache():
        pass

    @staticmethod
    def ipc_collect():
        pass


transfer.get_torch_device = CpuDevice
transfer.is_support_ipc = lambda: False


def path(folder: str, job: str) -> str:
    return f"ipc://{folder}/rl-colocate-zmq-{job}-replica-0-rank-0.sock"


def bound_inode(handle: str, other: int | None, timeout: float) -> int:
    """The inode of the socket file at handle once it exists and is not `other` (the previous binder's)."""
    file, deadline = handle[len("ipc://"):], time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            inode = os.stat(file).st_ino
            if inode != other:
                return inode
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"{file} was not bound within {timeout} s")


def send(handle: str, label: str, done: dict):
    sender = transfer.BucketedWeightSender(handle, bucket_size_mb=1, use_shm=True)
    try:
        asyncio.run(sender.async_send_weights(iter([(f"{label}.layer.weight", torch.ones(4))])))
        done[f"sender of job {label}"] = "finished"
    except Exception as e:  # noqa: BLE001  reported
        done[f"sender of job {label}"] = f"{type(e).__name__}: {e}"


def receive(handle: str, label: str, done: dict):
    receiver = transfer.BucketedWeightReceiver(handle, device=torch.device("cpu"), use_shm=True)
    got = []
    try:
        receiver.receive_weights(lambda weights, is_last: got.extend(name for name, _ in weights))
        done[f"rollout of job {label}"] = {"finished": True, "got": got}
    except Exception as e:  # noqa: BLE001  reported
        done[f"rollout of job {label}"] = {"finished": False, "got": got, "error": f"{type(e).__name__}: {e}"}


def scenario(ids: dict[str, str], timeout: float) -> dict:
    """Job A's sender binds, then job B's, then both rollouts connect, as two overlapping syncs do. ids: each job's
    Ray job id."""
    folder = tempfile.mkdtemp(prefix="wsync")
    done, threads, inodes = {}, [], {}
    for label, job in ids.items():
        threads.append(threading.Thread(target=send, args=(path(folder, job), label, done), daemon=True))
        threads[-1].start()
        inodes[label] = bound_inode(path(folder, job), inodes.get("A") if job == ids["A"] else None, timeout)
    for label, job in ids.items():
        threads.append(threading.Thread(target=receive, args=(path(folder, job), label, done), daemon=True))
        threads[-1].start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    for label in ids:
        done.setdefault(f"sender of job {label}", f"still waiting after {timeout:.0f} s")
        done.setdefault(f"rollout of job {label}", {"finished": False, "got": [], "error": "still waiting"})
    return {"ray job ids": ids, "socket files": sorted({path(folder, j).rsplit("/", 1)[1] for j in ids.values()}),
            "outcome": dict(sorted(done.items()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--out")
    args = parser.parse_args()
    shared = {"A": "01000000", "B": "01000000"}
    distinct = {"A": "e8030000", "B": "e9030000"}  # Ray's spelling of job ids 1000 and 1001
    result = {"what": __doc__.split("\n\n")[0],
              "command": "benchmarks/weight_sync_socket.py" + (f" --out {args.out}" if args.out else ""),
              "timeout_s": args.timeout,
              "distinct": scenario(distinct, args.timeout), "shared": scenario(shared, args.timeout)}
    text = json.dumps(result, indent=1)
    print(text, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    os._exit(0)  # the senders left waiting are daemon threads blocked in ZMQ: nothing else would end them


if __name__ == "__main__":
    main()
