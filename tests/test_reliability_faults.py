"""Faults during and around `verlenv install`, over an offline wheelhouse of tiny real wheels: an install killed
(SIGKILL, its whole process group) at random points and run again, two installs at once into one prefix, files
of an env deleted or overwritten, a report path that fails after the checks ran. Each ends in an env equal to
its lock (checked file by file against the wheels, not by verlenv's own check) or in one clear line."""

import glob
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tiny_project
from reliability_log import record
from waiting import StreamLines

# $VERLENV_FAULT_SEED replays a run; the seed is in the failure message.
SEED = int(os.environ.get("VERLENV_FAULT_SEED", random.randrange(1 << 30)))
KILLS = int(os.environ.get("VERLENV_FAULT_KILLS", "6"))
HOLD_PREFIX = Path(__file__).parent / "data" / "programs" / "hold_prefix.py"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return tiny_project.make(tmp_path_factory.mktemp("faults") / "project", data_mib=4)


def install(project: Path, prefix: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(tiny_project.verlenv_cmd("install", "--prefix", str(prefix), *extra),
                            env=tiny_project.env(project), cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def finish(p: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    _, err = p.communicate(timeout=timeout)
    return p.returncode, err


def site_packages(prefix: Path) -> Path:
    return Path(glob.glob(str(prefix / "lib" / "python*" / "site-packages"))[0])


def test_sigkill_at_random_points_then_rerun_equals_lock(project: Path, tmp_path: Path):
    # The full run's length sets the range of kill points: from interpreter start to the last file check.
    started = time.monotonic()
    rc, err = finish(install(project, tmp_path / "baseline", "--python", sys.executable))
    full = time.monotonic() - started
    assert rc == 0, err
    rng = random.Random(SEED)
    for i in range(KILLS):
        prefix = tmp_path / f"env{i}"
        if i % 2:  # half the kills land on an existing env being re-installed (sync, then the file check)
            assert finish(install(project, prefix, "--python", sys.executable))[0] == 0
            (site_packages(prefix) / "tiny3" / "data.bin").unlink()
        at = rng.uniform(0.05, full)
        p = install(project, prefix, "--python", sys.executable)
        time.sleep(at)
        killed = p.poll() is None
        # Mostly the whole process group (a node lost, the OOM killer's cgroup); every third run verlenv alone,
        # its uv left running as an orphan while the re-run starts.
        whole = i % 3 != 2
        if killed:
            os.killpg(p.pid, signal.SIGKILL) if whole else os.kill(p.pid, signal.SIGKILL)
        p.communicate()
        state = "new env" if i % 2 == 0 else "existing env, a file deleted"
        rc, err = finish(install(project, prefix, "--python", sys.executable))
        problems = tiny_project.differences(project, prefix)
        ok = rc == 0 and not problems
        who = "with its process group" if whole else "alone (its uv child lives on)"
        record("fault", f"install ({state}) SIGKILLed {who} {at:.2f} s in (run {full:.2f} s, seed {SEED})"
               + ("" if killed else "; it had already finished"),
               "re-run: exit 0, env equals the lock" if ok else f"re-run: exit {rc}, {problems[:3]}", ok)
        left = sorted(p.name for p in prefix.iterdir()) if rc and prefix.is_dir() else []
        assert rc == 0, f"seed {SEED}, kill {i} at {at:.2f} s: {err} (the folder held {left[:8]})"
        assert not problems, f"seed {SEED}, kill {i} at {at:.2f} s: {problems}"


def test_an_install_waits_for_one_making_the_prefix_instead_of_calling_it_foreign(project: Path, tmp_path: Path):
    """The race CI hit under load: the first install had made the folder and its first file (write_atomic's temp
    file, before the creating mark is renamed in) when the second judged the folder "neither empty nor an env"."""
    from verlenv.env.install import prefix_lock

    prefix = tmp_path / "env"
    with prefix_lock(prefix, conda=False):  # this test is the first install, mid-way
        prefix.mkdir()
        (prefix / ".tmp-mark").write_text("")
        second = install(project, prefix, "--python", sys.executable)
        err = StreamLines(second.stderr)
        assert err.wait_for("is being installed by verlenv install (pid"), err.text()
        shutil.rmtree(prefix)  # the first one gave up and removed its half-made env
    assert second.wait(timeout=600) == 0, err.text()
    assert not tiny_project.differences(project, prefix)


def test_an_install_killed_before_its_creating_mark_was_renamed_in_is_made_again(project: Path, tmp_path: Path):
    """What a SIGKILL 0.11 s into a new install left (CI, and a replay that listed the folder): the folder and the
    creating mark's temp file (write_atomic's, not yet renamed). The re-run must take it for its own half-made env."""
    prefix = tmp_path / "env"
    prefix.mkdir()
    (prefix / "..verlenv-creating.4k1s67bp.tmp").write_text("")  # the name the killed install left
    rc, err = finish(install(project, prefix, "--python", sys.executable))
    assert rc == 0, err
    assert "an earlier install was cut short while making it; making it again" in err
    assert not tiny_project.differences(project, prefix)
    assert not list(prefix.glob("*verlenv-creating*"))  # the leftover went with the half-made folder


def test_a_half_made_env_is_renamed_aside_before_removal(project: Path, tmp_path: Path, monkeypatch):
    """Removal killed half-way must not leave the prefix with some files and no creating mark: discard renames the
    folder aside first, and the next install removes what is left there."""
    from verlenv.env import install as plain

    prefix = tmp_path / "env"
    (prefix / "lib").mkdir(parents=True)
    (prefix / plain.CREATING).write_text("")
    (prefix / "lib" / "partial.py").write_text("")
    with monkeypatch.context() as m:
        m.setattr(plain.shutil, "rmtree", lambda *a, **k: None)  # killed right after the rename
        plain.discard(prefix)
    assert not prefix.exists()
    left = list(tmp_path.glob(".env.discarded-*"))
    assert len(left) == 1 and (left[0] / "lib" / "partial.py").exists()
    rc, err = finish(install(project, prefix, "--python", sys.executable))
    assert rc == 0, err
    assert not list(tmp_path.glob(".env.discarded-*"))
    assert not tiny_project.differences(project, prefix)


def test_two_installs_into_one_prefix_wait_for_each_other(project: Path, tmp_path: Path):
    prefix = tmp_path / "env"
    first = install(project, prefix, "--python", sys.executable)
    second = install(project, prefix, "--python", sys.executable)
    (rc1, err1), (rc2, err2) = finish(first), finish(second)
    waited = [e for e in (err1, err2) if "is being installed by verlenv install (pid" in e and "waiting" in e]
    problems = tiny_project.differences(project, prefix)
    ok = rc1 == rc2 == 0 and not problems
    record("fault", "two `verlenv install` into one new prefix at once",
           f"both exit 0, {len(waited)} waited with a message, env equals the lock" if ok
           else f"exits {rc1}, {rc2}: {problems}", ok)
    assert rc1 == 0 and rc2 == 0, err1 + err2
    assert not problems
    # Unless one finished before the other started, the second one said it waited, and for whom.
    assert len(waited) <= 1


def test_the_second_installer_waits_while_the_prefix_is_held(project: Path, tmp_path: Path):
    """The lock held for as long as a first installer runs (here a process holding it, as install does): the second
    says so and waits; it proceeds once the lock is released."""
    prefix = tmp_path / "env"
    holder = subprocess.Popen([sys.executable, str(HOLD_PREFIX), str(prefix)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    second = install(project, prefix, "--python", sys.executable)
    err = StreamLines(second.stderr)
    said = err.wait_for(f"{prefix} is being installed by verlenv install (pid {holder.pid})")
    waiting = second.poll() is None  # it cannot have finished while the lock is held
    holder.stdin.close()  # the first installer is done
    holder.wait()
    rc, text = second.wait(timeout=600), err.text()
    ok = rc == 0 and said and waiting
    record("fault", "`verlenv install` while another install holds the prefix",
           "waits with one line naming the holder's pid, then exit 0 once it is released" if ok
           else f"exit {rc}: {text}", ok)
    assert ok, text
    assert not tiny_project.differences(project, prefix)


@pytest.mark.parametrize("damage", ["delete a data file", "overwrite a data file in place (same size)",
                                    "truncate a module", "overwrite a console script", "delete a package folder"])
def test_install_repairs_damaged_files(project: Path, tmp_path: Path, damage: str):
    prefix = tmp_path / "env"
    assert finish(install(project, prefix, "--python", sys.executable))[0] == 0
    site = site_packages(prefix)
    if damage == "delete a data file":
        (site / "tiny1" / "data.bin").unlink()
    elif damage.startswith("overwrite a data file"):
        # In place: uv hard-links installed files to its cache, so this changes the cached copy too.
        with open(site / "tiny2" / "data.bin", "r+b") as f:
            f.seek(1000)
            f.write(b"garbage!")
    elif damage == "truncate a module":
        (site / "tiny4" / "__init__.py").write_text("")
    elif damage == "overwrite a console script":
        script = prefix / "bin" / "tiny5-cli"
        script.unlink()
        script.write_text("#!/bin/sh\necho not tiny5\n")
        script.chmod(0o755)
    else:
        shutil.rmtree(site / "tiny0")
    assert tiny_project.differences(project, prefix), "the damage did not take"
    rc, err = finish(install(project, prefix))
    problems = tiny_project.differences(project, prefix)
    ok = rc == 0 and not problems and ("repaired" in err or damage == "delete a package folder")
    record("fault", f"env damaged ({damage}), then `verlenv install`",
           "exit 0, " + ("reinstalled from the lock" if "repaired" in err else "synced") + ", env equals the lock"
           if ok else f"exit {rc}: {problems[:3]}", ok)
    assert rc == 0, err
    assert not problems, problems


def test_verify_names_every_damaged_locked_distribution(project: Path, tmp_path: Path):
    prefix = tmp_path / "env"
    assert finish(install(project, prefix, "--python", sys.executable))[0] == 0
    with open(site_packages(prefix) / "tiny3" / "data.bin", "r+b") as f:
        f.write(b"x")  # one byte, same size: only a hash tells
    report = tmp_path / "report.json"
    r = subprocess.run(tiny_project.verlenv_cmd("verify", "--python", str(prefix / "bin" / "python"), "--report",
                                                str(report)),
                       env=tiny_project.env(project), cwd=project, capture_output=True, text=True, timeout=300)
    import json

    checks = {c["name"]: c for c in json.loads(report.read_text())["checks"]}
    files = checks["intact/locked-files"]
    ok = r.returncode == 1 and files["status"] == "fail" and "tiny3" in files["reason"]
    record("fault", "one byte of an installed data file changed (same size), then `verlenv verify`",
           f"exit {r.returncode}, intact/locked-files: {files['status']}: "
           f"{files['reason'][:90].replace(str(prefix), '<env>')}…", ok)
    assert ok, files
    assert list(files["numbers"]["damaged"]) == ["tiny3"]


def test_verify_report_goes_to_a_printed_fallback_when_its_folder_fails(project: Path, tmp_path: Path, monkeypatch,
                                                                        capsys):
    """The report's folder passes the check before the run, then is replaced by a file while the checks run
    (as when a job's scratch folder goes away): the results land in the temp folder, which is printed."""
    from verlenv import cli
    from verlenv.verify import runner

    prefix = tmp_path / "env"
    assert finish(install(project, prefix, "--python", sys.executable))[0] == 0
    folder = tmp_path / "reports"
    real_verify = runner.verify

    def verify_then_lose_the_folder(*args, **kwargs):
        run = real_verify(*args, **kwargs)
        shutil.rmtree(folder)
        folder.write_text("not a folder any more")
        return run

    monkeypatch.setattr(runner, "verify", verify_then_lose_the_folder)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    for k, v in tiny_project.env(project).items():
        monkeypatch.setenv(k, v)
    rc = cli.main(["verify", "--python", str(prefix / "bin" / "python"), "--report", str(folder / "r.json")])
    err = capsys.readouterr().err
    fallback = [p for p in tmp_path.glob("verlenv-*-r.json")]
    ok = rc == 2 and len(fallback) == 1 and str(fallback[0]) in err and '"checks"' in fallback[0].read_text()
    record("fault", "`verlenv verify --report DIR/r.json` whose DIR becomes a file while the checks run",
           "exit 2, report written to the temp folder, its path printed" if ok else f"exit {rc}: {err[-300:]}", ok)
    assert ok, err


def test_install_refuses_an_edited_lock_before_touching_the_env(project: Path, tmp_path: Path):
    prefix = tmp_path / "env"
    assert finish(install(project, prefix, "--python", sys.executable))[0] == 0
    edited = tmp_path / "edited"
    shutil.copytree(project, edited, ignore=shutil.ignore_patterns("uv-cache"))
    lock = edited / "locks" / "tiny-fsdp.linux-64.txt"
    lock.write_text(lock.read_text().replace("tiny5==1.0", "tiny5==1.0 ; sys_platform == 'win32'"))
    marker = (prefix / "verlenv-env.json").read_text()
    p = subprocess.run(tiny_project.verlenv_cmd("install", "--prefix", str(prefix)), env=tiny_project.env(edited),
                       cwd=edited, capture_output=True, text=True, timeout=120)
    line = p.stderr.strip()
    ok = (p.returncode == 2 and "\n" not in line and "edited after `verlenv lock` wrote it" in line
          and (prefix / "verlenv-env.json").read_text() == marker and not tiny_project.differences(project, prefix))
    record("fault", "`verlenv install` over an existing env with a lock edited after `verlenv lock` wrote it",
           f"exit {p.returncode}: {line.replace(str(edited), '<project>')}; the env untouched" if ok
           else f"exit {p.returncode}: {line}", ok)
    assert ok, p.stderr


@pytest.mark.network  # `uv venv --seed` takes pip from PyPI
def test_pip_installer_repairs_damaged_files_too(project: Path, tmp_path: Path):
    env = {k: v for k, v in tiny_project.env(project).items() if k != "UV_NO_INDEX"}
    env |= {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(project / "wheelhouse")}
    prefix = tmp_path / "env"
    cmd = tiny_project.verlenv_cmd("install", "--prefix", str(prefix), "--installer", "pip")
    first = subprocess.run([*cmd, "--python", sys.executable], env=env, cwd=project, capture_output=True, text=True,
                           timeout=300)
    assert "with pip in" in first.stderr, first.stderr
    (site_packages(prefix) / "tiny1" / "data.bin").write_bytes(b"short")
    r = subprocess.run(cmd, env=env, cwd=project, capture_output=True, text=True, timeout=300)
    # The seeded pip (and what uv seeds with it) is not in this lock, so the drift check names it: expected here.
    drift = [line for line in r.stderr.splitlines() if line.startswith("drift check") and ": fail: " in line]
    seeded_only = all("not in the lock" in line and "tiny" not in line for line in drift)
    problems = [p for p in tiny_project.differences(project, prefix) if "installed [" not in p]
    ok = "repaired tiny1" in r.stderr and seeded_only and not problems
    record("fault", "env installed with `--installer pip`, a data file overwritten, then "
           "`verlenv install --installer pip`",
           "tiny1 reinstalled from its locked line; every locked file equals its wheel" if ok
           else f"exit {r.returncode}: {problems}", ok)
    assert ok, r.stderr


def test_a_file_two_locked_distributions_ship_is_not_damage(tmp_path: Path):
    """Two locked wheels may install the same file (the default stack has two such pairs: flashinfer-python and
    torch-c-dlpack-ext both ship build_backend.py); whichever came last is right, and no re-run flip-flops."""
    project = tiny_project.make(tmp_path / "project", data_mib=0, packages={
        "tinya": {"shared_backend.py": b"A = 1\n"}, "tinyb": {"shared_backend.py": b"B = 2\n"}})
    prefix = tmp_path / "env"
    assert finish(install(project, prefix, "--python", sys.executable))[0] == 0
    runs = [finish(install(project, prefix)) for _ in range(2)]
    from verlenv.env import installed_files

    scan = installed_files.check(str(prefix / "bin" / "python"), ["tinya", "tinyb"])
    ok = all(rc == 0 and "all as installed" in err for rc, err in runs) and scan["dists"]["tinya"]["shared"] == 1
    record("fault", "two locked wheels ship the same file; `verlenv install` run twice more",
           "exit 0 both times, all as installed (no reinstall back and forth)" if ok else f"{runs}", ok)
    assert ok, runs
    # A file changed by neither wheel is still damage.
    (site_packages(prefix) / "shared_backend.py").write_text("C = 3\n")
    scan = installed_files.check(str(prefix / "bin" / "python"), ["tinya", "tinyb"])
    assert all(e["changed_count"] == 1 for e in scan["dists"].values())
