"""How many trainers the fast proof runs at once: the GPU's memory and the host's both bound it (GPU visit R: six
trainers took 23.3 GiB of an H100's memory and left 35.9 of the host's 125.8 GiB available)."""

import pytest

from test_verify_runner import settings
from verlenv.catalog import families
from verlenv.native.parallelism import usable_gib
from verlenv.verify import jit_jobs, report
from verlenv.verify.jit_jobs import TRAINER_HOST_GIB
from verlenv.verify.trainer_slots import TRAINER_GIB, trainers_at_once


@pytest.mark.parametrize("n, gpu, host, expected", [
    (12, 80, 126, 5),    # an H100 node: the host's memory, not the GPU's, bounds it
    (12, 139, 2000, 11),  # an H200 on a large host: the GPU's memory
    (2, 139, 2000, 2),   # no more trainers than families
    (12, 80, 10, 1),     # a small host still runs one
    (12, 80, None, 6),   # a host that cannot say: the GPU's bound alone
])
def test_the_smallest_bound_wins(n, gpu, host, expected):
    slots = trainers_at_once(n, gpu, host, thorough=False)
    assert slots.trainers == expected and slots.why.startswith(f"{expected} at once")
    assert ("host memory" in slots.why) == (host is not None)


def test_the_bounds_follow_the_constants():
    host = 300.0
    assert trainers_at_once(99, 1000, host, False).trainers == int(usable_gib(host) // TRAINER_HOST_GIB)
    assert trainers_at_once(99, 5 * TRAINER_GIB + 1, None, False).trainers == 5


def test_thorough_runs_one_whatever_the_machine():
    assert trainers_at_once(12, 139, 2000, thorough=True).trainers == 1


def test_the_runner_sends_the_count_and_why(tmp_path, monkeypatch):
    table = families.table()
    rows = table.rows([table.families[n] for n in ("llama", "qwen2", "qwen3", "qwen3-moe")])
    monkeypatch.setattr(jit_jobs, "mem_available_gib", lambda: 126.0)
    trainer = settings(tmp_path, families=rows).trainer()  # an H100 (80 GB) of the runner's test settings
    assert trainer["parallel"] == min(4, int(usable_gib(126.0) // TRAINER_HOST_GIB)) == 4
    monkeypatch.setattr(jit_jobs, "mem_available_gib", lambda: 50.0)
    s = settings(tmp_path, families=rows)
    assert s.trainer()["parallel"] == 2 and "50 GiB of host memory" in s.slots().why

    def no_meminfo():
        raise OSError("no /proc/meminfo")
    monkeypatch.setattr(jit_jobs, "mem_available_gib", no_meminfo)
    assert settings(tmp_path, families=rows).trainer()["parallel"] == 4  # the GPU's bound: 80 // 12 = 6


def test_the_report_says_how_many_ran_at_once_and_why(tmp_path, monkeypatch):
    table = families.table()
    monkeypatch.setattr(jit_jobs, "mem_available_gib", lambda: 50.0)
    s = settings(tmp_path, families=table.rows([table.families[n] for n in ("llama", "qwen2", "qwen3")]))
    section = report.trainer_section(s)
    assert section["at_once"].startswith("2 at once") and "50 GiB of host memory" in section["at_once"]
    monkeypatch.setattr(jit_jobs, "mem_available_gib", lambda: 2000.0)  # decided once: a later reading changes nothing
    assert s.trainer()["parallel"] == 2 and report.trainer_section(s) == section
    assert "at_once" not in report.trainer_section(settings(tmp_path))
