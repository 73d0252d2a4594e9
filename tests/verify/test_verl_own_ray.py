"""verl's trainer, each in a Ray instance of its own, gets a Ray job id no other trainer on the host has
(verify/kernels/_verl_own_ray.py): verl 0.9.1 names its weight-sync socket by that id, and every fresh Ray instance
numbers its first job 01000000. Real Ray instances in the default stack's env, on the CPU; the child each wrapper runs
is a stand-in for verl's driver (it calls ray.init() as verl's main_ppo does and prints its job id)."""

import importlib.util
import os
import subprocess
import sys
import tempfile

import pytest

from test_kernel_scripts import has_modules, torch_python
from verlenv.doctor import node_probes
from verlenv.verify import kernels

PROGRAM = os.path.join(os.path.dirname(kernels.__file__), "_verl_own_ray.py")
_spec = importlib.util.spec_from_file_location("_verl_own_ray", PROGRAM)
own_ray = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(own_ray)

# The stand-in driver: joins the Ray that RAY_ADDRESS names, as verl's `ray.init(**ray_init_kwargs)` does, prints its
# job id, then waits for one line on stdin (the test holds every driver alive until all have printed) and exits 3.
DRIVER = ("import ray, sys; ray.init(log_to_driver=False); "
          "print('job', ray.get_runtime_context().get_job_id(), flush=True); sys.stdin.readline(); sys.exit(3)")
FRESH_RAY_FIRST_JOB = "01000000"


@pytest.fixture(scope="module")
def python() -> str:
    found = torch_python()
    if found is None or not has_modules(found, "ray"):
        pytest.skip("no env python with Ray: set VERLENV_TEST_TORCH_PYTHON or create a .venv-<stack>-<variant> env")
    return found


def start(python: str, slot_dir, *driver: str) -> subprocess.Popen:
    # Ray's socket paths must stay under 107 bytes: a short folder of /tmp, not pytest's tmp_path
    env = {**os.environ, "RAY_TMPDIR": tempfile.mkdtemp(prefix="vr", dir="/tmp"), "RAY_ADDRESS": "local"}
    proc = subprocess.Popen([python, PROGRAM, str(slot_dir), "--", *driver], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    proc.ray_tmp = env["RAY_TMPDIR"]
    return proc


def ray_job_hex(python: str, number: int) -> str:
    """Ray's own spelling of job id `number` (little-endian hex: 1 is 01000000)."""
    code = f"import ray; print(ray.JobID.from_int({number}).hex())"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def read_until(proc: subprocess.Popen, prefix: str) -> tuple[str, list[str]]:
    """The first line starting with prefix (and every line before it); the driver's output ending first fails."""
    seen = []
    for line in proc.stdout:
        if line.startswith(prefix):
            return line.strip(), seen
        seen.append(line)
    raise AssertionError(f"no {prefix!r} line; output:\n" + "".join(seen[-40:]))


def test_two_trainers_at_once_get_two_job_ids_neither_a_fresh_rays_first(python, tmp_path):
    runs = [start(python, tmp_path, python, "-c", DRIVER) for _ in range(2)]
    try:
        marks, jobs = [], []
        for run in runs:  # both drivers are up, and hold their slots, before either is let go
            mark, before = read_until(run, own_ray.MARK)
            line, _ = read_until(run, "job ")
            marks.append(mark)
            jobs.append(line.split()[1])
            # the wrapper's own Ray start leaves none of the lines the trainer's phases read as milestones
            assert not [x for x in before if "Started a local Ray instance" in x or "Connected to Ray" in x], before
        assert len(set(jobs)) == 2 and FRESH_RAY_FIRST_JOB not in jobs, jobs
        assert sorted(m.split(":")[1].strip().split()[1] for m in marks) == ["0", "1"], marks  # "slot K:"
        assert {m.split(" as job ")[1].split()[0] for m in marks} == set(jobs), (marks, jobs)  # it says the id
        assert sorted(jobs) == sorted(ray_job_hex(python, own_ray.FIRST_JOB + k) for k in (0, 1))
        # the doctor's probe sees both instances (and any other on this machine), each by its GCS server
        sessions = [i["session"] or "" for i in node_probes.ray_instances()]
        assert all(any(s.startswith(run.ray_tmp + "/") for s in sessions) for run in runs), sessions
        for run in runs:
            run.stdin.write("\n")
            run.stdin.flush()
        assert [run.wait(timeout=120) for run in runs] == [3, 3]  # the driver's exit code is the wrapper's
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait()


def test_a_slot_is_free_again_once_its_holder_closes_it(tmp_path):
    first, held = own_ray.take_slot(str(tmp_path))
    second, other = own_ray.take_slot(str(tmp_path))
    assert (first, second) == (0, 1)
    os.close(held)
    third, again = own_ray.take_slot(str(tmp_path))
    assert third == 0
    os.close(again)
    os.close(other)


def test_without_a_command_it_says_how_and_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, PROGRAM, str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "usage: _verl_own_ray.py SLOT_DIR -- COMMAND..."
    assert not list(tmp_path.iterdir())  # nothing half-made


def test_a_driver_killed_by_a_signal_is_reported_as_that_signal(python, tmp_path):
    run = start(python, tmp_path, python, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    run.stdin.close()
    run.stdout.read()
    assert run.wait(timeout=120) == -9  # as the check saw verl's driver itself: "exited with -9"

