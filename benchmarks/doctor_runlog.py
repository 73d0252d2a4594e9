"""Time `verlenv doctor` on a verl-like run log beside the build-log figure, in one run.

A long verl run's driver log (`ray job logs`, the TaskRunner's stdout) is mostly: NCCL INFO lines (NCCL_DEBUG=INFO, as
verl's examples set it), vLLM's INFO lines from each rollout worker (start-up, sleep and wake around every step),
Ray's own lines (raylet, autoscaler), and one long step-metric line per step. The line shapes below are those of
public logs: verl's step line (verl-project/verl #1208, #2060), vLLM's "Model loading took" and KV-cache lines
(vllm-project/vllm #14574 and vLLM's gpu_model_runner.py / kv_cache_utils.py), NCCL INFO lines (vllm-project/vllm
#10626), raylet lines (ray-project/ray #46548, #22425). Numbers and ids vary line to line, as in a real run, so
nothing is one repeated string. The mix per step (MIX) is an estimate for an 8-GPU, 8-worker colocated run;
"Model loading took" lines are kept frequent on purpose: one signature used to backtrack on them (issue 52).

The run log ends with one failing line, so the whole file must be read. The build log is doctor_scan.py's
("builds": the real healthy build logs of tests/data/logs repeated), made and timed in the same run.
--baseline-src times another source tree's doctor (an older commit's `src`) once on each log, in the same run.
Usage: python benchmarks/doctor_runlog.py --mb 200 --repeat 3 [--baseline-src /tmp/base/src]
       --out docs/benchmarks/doctor-runlog.json
"""

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doctor_scan import FAILING, make_log, timed  # noqa: E402

WORKERS = 8


def _step_line(r: random.Random, step: int) -> str:
    """verl's metric line: one per step, ~2 KB (verl/trainer/ppo/ray_trainer.py prints the metrics dict)."""
    keys = ["global_seqlen/min", "global_seqlen/max", "global_seqlen/minmax_diff", "global_seqlen/balanced_min",
            "global_seqlen/balanced_max", "global_seqlen/mean", "actor/entropy", "actor/kl_loss", "actor/kl_coef",
            "actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower", "actor/grad_norm",
            "perf/mfu/actor", "perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb",
            "perf/cpu_memory_used_gb", "actor/lr", "training/global_step", "training/epoch", "critic/score/mean",
            "critic/score/max", "critic/score/min", "critic/rewards/mean", "critic/rewards/max",
            "critic/rewards/min", "critic/advantages/mean", "critic/advantages/max", "critic/advantages/min",
            "critic/returns/mean", "critic/returns/max", "critic/returns/min", "response_length/mean",
            "response_length/max", "response_length/min", "response_length/clip_ratio", "prompt_length/mean",
            "prompt_length/max", "prompt_length/min", "prompt_length/clip_ratio", "timing_s/gen",
            "timing_s/reward", "timing_s/old_log_prob", "timing_s/ref", "timing_s/adv", "timing_s/update_actor",
            "timing_s/step", "timing_per_token_ms/gen", "timing_per_token_ms/adv", "timing_per_token_ms/ref",
            "perf/total_num_tokens", "perf/time_per_step", "perf/throughput"]
    metrics = " - ".join(f"{k}:{r.uniform(-2, 600):.3f}" for k in keys)
    return f"(TaskRunner pid={r.randint(1000, 99999)}) step:{step} - {metrics}"


def _vllm(r: random.Random, worker: int) -> list[str]:
    """A rollout worker's vLLM lines around one step (sleep mode on, as verl runs it)."""
    head = f"(WorkerDict pid={20000 + worker}) INFO {r.randint(1, 12):02d}-{r.randint(1, 28):02d} " \
           f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}"
    return [
        f"{head} [gpu_model_runner.py:{r.randint(1500, 2500)}] Model loading took {r.uniform(1, 70):.4f} GiB "
        f"and {r.uniform(0.5, 90):.6f} seconds",
        f"{head} [gpu_worker.py:{r.randint(200, 300)}] Available KV cache memory: {r.uniform(5, 60):.2f} GiB",
        f"{head} [kv_cache_utils.py:{r.randint(700, 900)}] GPU KV cache size: {r.randint(10**5, 10**6):,} tokens",
        f"{head} [kv_cache_utils.py:{r.randint(700, 900)}] Maximum concurrency for {r.choice([4096, 8192])} "
        f"tokens per request: {r.uniform(10, 300):.2f}x",
        f"{head} [executor_base.py:{r.randint(200, 230)}] It took {r.uniform(0.2, 3):.6f} seconds to fall asleep.",
        f"{head} [gpu_worker.py:{r.randint(100, 130)}] Sleep mode freed {r.uniform(20, 70):.2f} GiB memory, "
        f"{r.uniform(1, 9):.2f} GiB memory is still in use.",
        f"{head} [executor_base.py:{r.randint(200, 230)}] It took {r.uniform(0.1, 2):.6f} seconds to wake up tags "
        "['weights'].",
        f"{head} [block_pool.py:{r.randint(300, 330)}] Successfully reset prefix cache",
    ]


def _nccl(r: random.Random, rank: int) -> list[str]:
    """NCCL_DEBUG=INFO lines of one rank joining a communicator (weight sync and the actor's process groups)."""
    host = f"node{r.randint(1, 4)}:{r.randint(10000, 99999)}:{r.randint(10000, 99999)} [{rank}]"
    comm = f"0x{r.getrandbits(36):x}"
    out = [
        f"{host} NCCL INFO Bootstrap : Using eth0:10.0.{r.randint(0, 255)}.{r.randint(1, 254)}<0>",
        f"{host} NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file: "
        "No such file or directory : when loading libnccl-net.so",
        f"{host} NCCL INFO NET/Plugin: Using internal network plugin.",
        f"{host} NCCL INFO NET/IB : No device found.",
        f"{host} NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks {WORKERS} cudaDev {rank} nvmlDev {rank} "
        f"busId {r.randint(10, 250)}0 commId 0x{r.getrandbits(64):x} - Init START",
        f"{host} NCCL INFO Trees [0] {(rank + 1) % WORKERS}/-1/-1->{rank}->{(rank - 1) % WORKERS} "
        f"[1] {(rank + 1) % WORKERS}/-1/-1->{rank}->{(rank - 1) % WORKERS}",
        f"{host} NCCL INFO P2P Chunksize set to 131072",
    ]
    out += [f"{host} NCCL INFO Channel {c:02d}/0 : {rank}[{rank}] -> {(rank + 1) % WORKERS}[{(rank + 1) % WORKERS}] "
            f"via P2P/CUMEM/read" for c in range(r.randint(8, 24))]
    out.append(f"{host} NCCL INFO comm {comm} rank {rank} nranks {WORKERS} cudaDev {rank} nvmlDev {rank} busId "
               f"{r.randint(10, 250)}0 commId 0x{r.getrandbits(64):x} - Init COMPLETE")
    return out


def _ray(r: random.Random) -> list[str]:
    stamp = f"[2025-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}:" \
            f"{r.randint(0, 59):02d},{r.randint(0, 999):03d} I {r.randint(100, 9999)} {r.randint(100, 9999)}]"
    return [
        f"(raylet) {stamp} (raylet) node_manager.cc:{r.randint(600, 700)}: New job has started. Job id "
        f"{r.randint(1, 99):02d}000000 Driver pid {r.randint(100, 9999)} is dead: 0 driver address: "
        f"10.0.0.{r.randint(2, 9)}",
        f"(raylet) {stamp} (raylet) node_manager.cc:{r.randint(600, 700)}: Sending Python GC request to "
        f"{r.randint(2, 16)} local workers to clean up Python cyclic references.",
        f"(autoscaler +{r.randint(1, 59)}m{r.randint(0, 59)}s) Tip: use `ray status` to view detailed cluster status.",
    ]


def make_run_log(path: Path, size: int, seed: int = 0) -> dict:
    """A verl-like run log of about `size` bytes, one failing line at its end; returns its line counts by kind."""
    r = random.Random(seed)
    counts = {"step": 0, "vllm": 0, "nccl": 0, "ray": 0}
    written, step = 0, 0
    with open(path, "w") as f:
        while written < size:
            step += 1
            parts = [("nccl", line) for rank in range(WORKERS) for line in _nccl(r, rank)] if step % 10 == 1 else []
            parts += [("vllm", line) for w in range(WORKERS) for line in _vllm(r, w)]
            parts += [("ray", line) for _ in range(2) for line in _ray(r)]
            parts.append(("step", _step_line(r, step)))
            for kind, line in parts:
                f.write(line + "\n")
                written += len(line) + 1
                counts[kind] += 1
        f.write(FAILING.decode())
    return counts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=200, help="size of each log in MB (10^6 bytes)")
    p.add_argument("--repeat", type=int, default=1, help="run the sequence this many times")
    p.add_argument("--baseline-src", type=Path, help="a verlenv src tree to time once beside this one")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="verlenv-doctor-runlog-"))
    try:
        doctor = [sys.executable, "-m", "verlenv", "doctor"]
        logs = {"verl-run": work / "verl-run.log", "builds": work / "builds.log"}
        lines = make_run_log(logs["verl-run"], args.mb * 10**6)
        make_log(logs["builds"], args.mb * 10**6, "healthy-*-build.log")
        report = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                  "python": platform.python_version(), "command": " ".join(["python", *sys.argv]),
                  "commit": subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "--short", "HEAD"],
                                           capture_output=True, text=True).stdout.strip(),
                  "run_log_lines": lines, "logs": {}}
        found = True
        for kind, log in logs.items():
            subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # same page cache for both
            size = log.stat().st_size
            repetitions = []
            for _ in range(args.repeat):
                run = timed([*doctor, str(log)])
                run["mb_per_s"] = round(size / 1e6 / run["seconds"], 1)
                run["mb_per_cpu_s"] = round(size / 1e6 / max(run["cpu_seconds"], 0.01), 1)
                run["load_average"] = os.getloadavg()[0]
                found &= run["exit"] == 1 and any("[F10]" in line for line in run["output_head"])
                repetitions.append(run)
                print(kind, f"{run['seconds']:.2f} s ({run['mb_per_s']} MB/s, {run['mb_per_cpu_s']} MB/cpu-s, "
                      f"{run['peak_rss_mib']} MiB) load {run['load_average']:.1f}", flush=True)
            if args.baseline_src:
                env = {**os.environ, "PYTHONPATH": str(args.baseline_src)}
                base = timed([*doctor, str(log)], env)
                base["mb_per_s"] = round(size / 1e6 / base["seconds"], 1)
                base["mb_per_cpu_s"] = round(size / 1e6 / max(base["cpu_seconds"], 0.01), 1)
                base["src"] = str(args.baseline_src)
                repetitions.append({"baseline": base})
                print(kind, f"baseline {base['seconds']:.2f} s ({base['mb_per_s']} MB/s, {base['mb_per_cpu_s']} "
                      "MB/cpu-s)", flush=True)
            report["logs"][kind] = {"bytes": size, "repetitions": repetitions,
                                    "best_mb_per_s": max(x["mb_per_s"] for x in repetitions if "mb_per_s" in x),
                                    "best_mb_per_cpu_s": max(x["mb_per_cpu_s"] for x in repetitions
                                                             if "mb_per_cpu_s" in x)}
        run_log, builds = report["logs"]["verl-run"], report["logs"]["builds"]
        report["run_log_over_build_log_cpu"] = round(builds["best_mb_per_cpu_s"] / run_log["best_mb_per_cpu_s"], 2)
        report["failing_line_found"] = found
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        return 0 if found else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
