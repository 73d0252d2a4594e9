"""Run by verl's trainer check in the env's python, by path: `_verl_own_ray.py SLOT_DIR -- COMMAND...` runs COMMAND
(verl's driver, `python -m verl.trainer.main_ppo ...`) joined to a Ray instance of its own whose job id no other
trainer started so on this host has, and exits with COMMAND's exit code (or dies of the signal it died of).

Why: verl 0.9.1 hands the weights from the trainer to its colocated vLLM through a ZMQ socket at
/tmp/rl-colocate-zmq-{Ray job id}-replica-{replica}-rank-{local rank}.sock (verl-project/verl#6246, the fix of
#6233, keys it on the job id). Every fresh Ray instance numbers its first job 01000000, so two trainers on one host,
each in a Ray of its own (verify's side-by-side trainers; two `python -m verl.trainer.main_ppo` on one node), use the
same path. The sender removes the path and binds it again at every weight sync: when two syncs overlap, the first
sender waits for a receiver that can no longer reach it, and the receivers both connect to the second.

How: a host-wide slot K (an flock on SLOT_DIR/K.lock, held while this process lives and released by the kernel however
it ends), a Ray instance started here (this process is its job 1), job ids drawn from its counter up to FIRST_JOB+K-1,
then COMMAND with RAY_ADDRESS naming the instance: verl's ray.init() joins it as job FIRST_JOB+K.
Standard library plus the env's Ray."""

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import sys
import time

SLOTS = 64  # trainers at once on one host; far above what one node's GPUs and memory hold
# The first slot's job id: far above the ids of a fresh Ray's first jobs (01000000 is 1), which users' own verl jobs
# on the host have. Drawing an id costs about 0.3 ms (2,000 in 0.6 s on the 2-core CPU machine).
FIRST_JOB = 1000
MARK = "verlenv-own-ray: "


def take_slot(slot_dir: str) -> tuple[int, int]:
    """The lowest free slot and the descriptor holding its lock (kept open for this process's life). The folder is
    shared by every user of the host (its sticky bit as /tmp's): the socket path is shared by them all."""
    os.makedirs(slot_dir, exist_ok=True)
    if os.stat(slot_dir).st_uid == os.getuid():
        os.chmod(slot_dir, 0o1777)
    for slot in range(SLOTS):
        fd = os.open(os.path.join(slot_dir, f"{slot}.lock"), os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return slot, fd
        except BlockingIOError:
            os.close(fd)
    raise RuntimeError(f"all {SLOTS} slots of {slot_dir} are held: {SLOTS} trainers run on this host")


def start_instance(slot: int) -> tuple[str, str]:
    """A local Ray instance (this process its first driver, job 1) whose counter has given out every job id below
    FIRST_JOB+slot: the GCS address and the job id the next driver gets. Ray's INFO lines stay quiet: the trainer's
    log keeps one "Connected to Ray cluster" line, its driver's."""
    import ray

    ray.init(address="local", logging_level=logging.WARNING, log_to_driver=False)
    target = FIRST_JOB + slot
    taken = None
    for _ in range(target - 2):  # ids 2 .. target-1
        taken = ray._private.state.next_job_id()
    if taken is None or taken.int() != target - 1:
        raise RuntimeError(f"Ray's job counter gave {taken} where {target - 1} was due: this Ray numbers jobs "
                           "otherwise, and the trainer's weight-sync socket would not be its own")
    return ray.get_runtime_context().gcs_address, ray.JobID.from_int(target).hex()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: _verl_own_ray.py SLOT_DIR -- COMMAND...", file=sys.stderr)
        return 2
    start = time.monotonic()
    slot, _held = take_slot(argv[0])
    address, job = start_instance(slot)
    print(f"{MARK}slot {slot}: verl's driver joins Ray at {address} as job {job} "
          f"({time.monotonic() - start:.1f} s)", flush=True)
    code = subprocess.call(argv[2:], env={**os.environ, "RAY_ADDRESS": address})
    if code < 0:  # the driver died of a signal: so does this process, after its Ray, so that the check reads -N
        import ray

        ray.shutdown()
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP keep theirs, and need no reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
