"""The committed conda-lock.yml: conda-lock parses and renders it, `verlenv lock --check` proves it against the
snapshot and the uv locks and names any tampering in one line, and the offline solve reproduces it."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from project_files import copy_tree
from verlenv import cli
from verlenv.catalog import pins, stacks
from verlenv.errors import UserError
from verlenv.lock import conda_layer, locks, render

ROOT = Path(__file__).resolve().parents[1]
CATALOG = stacks.load(ROOT / "stacks.toml")
STACK = CATALOG.stack()
# The group of env files conda-lock.yml is made from (the stack's first base variant and those extending it).
GROUP = render.groups(STACK)[0]
LOCKFILE = ROOT / locks.CONDA_LOCK_FILE
SOURCES = [ROOT / name for name in locks.env_files(GROUP)]


def parsed():
    from conda_lock.lockfile import parse_conda_lock_file

    return parse_conda_lock_file(LOCKFILE)


def project_copy(tmp_path: Path) -> Path:
    """A temp copy of the project with the committed conda-lock.yml; returns its stacks.toml."""
    path = copy_tree(tmp_path)
    shutil.copy(LOCKFILE, tmp_path / locks.CONDA_LOCK_FILE)
    return path


def run_check(path: Path, capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    rc = cli.main(["lock", "--check", "--catalog", str(path), "--stack", STACK.name])
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("filtered out line")]
    return rc, err


def replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) >= 1, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_committed_lock_is_fresh(capsys):
    rc, err = run_check(ROOT / "stacks.toml", capsys)
    assert rc == 0, err


def test_lock_holds_the_solved_platforms_and_categories():
    locked = parsed()
    assert locked.metadata.platforms == GROUP.platforms == ["linux-64", "linux-aarch64"]
    conda = {(p.platform, p.name): p for p in locked.package if p.manager == "conda"}
    assert conda["linux-64", "python"].version.startswith("3.12.")
    assert conda["linux-64", "gxx"].version.startswith("13.")
    assert conda["linux-aarch64", "gxx"].url.split("/")[-2] == "linux-aarch64"
    assert {c for p in locked.package if p.manager == "conda" for c in p.categories} == {"main"}
    for platform in locked.metadata.platforms:
        want = conda_layer.category_locks(ROOT, GROUP, platform)
        pip = [p for p in locked.package if p.platform == platform and p.manager == "pip"]
        for category, pins_ in want.items():
            assert sorted(p.name for p in pip if category in p.categories) == sorted(pins_), (platform, category)
    # The Megatron variant is locked for both platforms (GB200/GH200): its extra pins are in each one's megatron
    # category.
    assert {p.platform for p in locked.package if "megatron" in p.categories} == {"linux-64", "linux-aarch64"}


def test_pip_urls_are_the_platforms_wheels():
    locked = parsed()
    torch = {p.platform: p.url for p in locked.package if p.manager == "pip" and p.name == "torch"}
    assert torch["linux-64"].endswith("-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert torch["linux-aarch64"].endswith("-cp312-cp312-manylinux_2_28_aarch64.whl")


@pytest.mark.parametrize("platform,extras", [("linux-64", []), ("linux-64", ["megatron"]), ("linux-aarch64", []),
                                             ("linux-aarch64", ["megatron"])])
def test_conda_lock_renders_each_platform_and_category(tmp_path, platform, extras):
    extra_args = [arg for e in extras for arg in ("-e", e)]
    result = subprocess.run([sys.executable, "-m", "conda_lock", "render", "--kind", "explicit", "-p", platform,
                             *extra_args, str(LOCKFILE), "--filename-template", str(tmp_path / "{platform}.txt")],
                            cwd=tmp_path, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    lines = (tmp_path / f"{platform}.txt").read_text().splitlines()
    assert "@EXPLICIT" in lines
    locked = [p for p in parsed().package if p.platform == platform]
    conda = {f"{p.url}#{p.hash.md5}" for p in locked if p.manager == "conda"}
    assert {line for line in lines if line.startswith("https://")} == conda
    categories = {"main", *extras}
    pip = {f"# pip {p.name} @ {p.url}#sha256={p.hash.sha256}" for p in locked
           if p.manager == "pip" and p.categories & categories}
    assert {line for line in lines if line.startswith("# pip ")} == pip


def test_offline_solve_reproduces_the_committed_conda_records():
    spec = conda_layer.lock_spec(SOURCES)
    for platform in spec.platforms:
        records = conda_layer.solve(ROOT, conda_layer.conda_specs(spec, platform), platform, STACK.cuda)
        committed = {p.url for p in parsed().package if p.platform == platform and p.manager == "conda"}
        assert {r.url for r in records} == committed, platform


def test_tampered_conda_sha256_in_the_lock_is_one_line(tmp_path, capsys):
    path = project_copy(tmp_path)
    python = next(p for p in parsed().package if p.manager == "conda" and p.name == "python")
    replace_once(tmp_path / locks.CONDA_LOCK_FILE, python.hash.sha256, "e" * 64)
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    assert err[:-1] == [f"conda-lock.yml: linux-64 python {python.version}: sha256/md5 differ from the snapshot record "
                        f"(lock {'e' * 64}, snapshot {python.hash.sha256})"]


def test_tampered_sha256_in_the_snapshot_is_one_line(tmp_path, capsys):
    path = project_copy(tmp_path)
    python = next(p for p in parsed().package if p.manager == "conda" and p.name == "python")
    replace_once(tmp_path / "locks/conda-forge/linux-64/repodata.json", python.hash.sha256, "1" * 64)
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    fn = python.url.rsplit("/", 1)[1]
    assert err[:-1] == [f"locks/conda-forge: {fn}'s hashes differ from those its sources published (provenance.json); "
                        f"the snapshot was edited: run `verlenv conda-snapshot`"]


def test_record_without_provenance_is_one_line(tmp_path, capsys):
    path = project_copy(tmp_path)
    provenance = tmp_path / "locks/conda-forge/provenance.json"
    table = json.loads(provenance.read_text())
    gxx = next(p for p in parsed().package if p.manager == "conda" and p.name == "gxx" and p.platform == "linux-64")
    del table[gxx.url]
    provenance.write_text(json.dumps(table))
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    assert err[:-1] == [f"locks/conda-forge: {gxx.url.rsplit('/', 1)[1]} has no provenance in provenance.json"]


def test_a_record_the_lock_lacks_is_named(tmp_path, capsys):
    path = project_copy(tmp_path)
    doc = yaml.safe_load((tmp_path / locks.CONDA_LOCK_FILE).read_text())
    doc["package"] = [p for p in doc["package"] if not (p["name"] == "libffi" and p["platform"] == "linux-64")]
    (tmp_path / locks.CONDA_LOCK_FILE).write_text(yaml.safe_dump(doc, sort_keys=False))
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    assert len(err) == 2
    assert err[0].startswith("conda-lock.yml: linux-64's conda records depend on packages the lock does not hold "
                             "(libffi-")


@pytest.mark.parametrize("field", ["version", "sha256"])
def test_pip_entry_that_differs_from_the_uv_lock_is_one_line(tmp_path, capsys, field):
    path = project_copy(tmp_path)
    doc = yaml.safe_load((tmp_path / locks.CONDA_LOCK_FILE).read_text())
    entry = next(p for p in doc["package"]
                 if p["manager"] == "pip" and p["name"] == "torch" and p["platform"] == "linux-64")
    pin = pins.read_lock(pins.lock_path(ROOT, STACK.variant("fsdp")))["torch"]
    if field == "version":
        entry["version"] = "2.10.0"
        want = f"conda-lock.yml: linux-64 pip torch is 2.10.0, the uv lock pins {pin.version}"
    else:
        entry["hash"]["sha256"] = "2" * 64
        want = (f"conda-lock.yml: linux-64 pip torch=={pin.version}: sha256 {'2' * 64} is not one of its uv lock "
                "line's hashes")
    (tmp_path / locks.CONDA_LOCK_FILE).write_text(yaml.safe_dump(doc, sort_keys=False))
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    assert err[:-1] == [want]


def test_a_pin_the_lock_lacks_is_named(tmp_path, capsys):
    path = project_copy(tmp_path)
    doc = yaml.safe_load((tmp_path / locks.CONDA_LOCK_FILE).read_text())
    doc["package"] = [p for p in doc["package"] if not (p["name"] == "megatron-core" and p["manager"] == "pip")]
    (tmp_path / locks.CONDA_LOCK_FILE).write_text(yaml.safe_dump(doc, sort_keys=False))
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    pin = pins.read_lock(pins.lock_path(ROOT, STACK.variant("megatron")))["megatron-core"]
    assert err[:-1] == [f"conda-lock.yml: {platform} pip megatron-core=={pin.version} (megatron) is in the uv lock, "
                        "not here" for platform in ("linux-64", "linux-aarch64")]


def test_unsatisfiable_spec_names_the_missing_package():
    with pytest.raises(UserError) as e:
        conda_layer.solve(ROOT, ["python 3.12.*", "no-such-package-in-the-snapshot"], "linux-64", STACK.cuda)
    assert str(e.value).splitlines() == [
        "cannot solve the conda layer for linux-64: no record of no-such-package-in-the-snapshot in locks/conda-forge "
        "for linux-64; add a public lock file that has it to locks/conda-forge/sources.toml and run "
        "`verlenv conda-snapshot`"]
    # Present but not at that version: the solver's own reason, on one line.
    with pytest.raises(UserError) as e:
        conda_layer.solve(ROOT, ["python 2.7.*"], "linux-64", STACK.cuda)
    assert len(str(e.value).splitlines()) == 1 and "python 2.7.*" in str(e.value)


def test_lock_without_a_channel_writes_nothing_for_a_stack_it_cannot_solve(tmp_path, capsys, monkeypatch):
    path = copy_tree(tmp_path)
    # A stand-in for the network state of the machine: no conda channel answers.
    monkeypatch.setattr(locks, "conda_unreachable", lambda: "test: no channel")
    stack = CATALOG.stack("verl-0.7")
    # conda-forge's `cuda-cccl` metapackage is in one public lock file only, so the snapshot has no record of it.
    replace_once(path, '"cuda-cccl_linux-64=12.8"', '"cuda-cccl=12.8"')
    assert cli.main(["render", "--catalog", str(path)]) == 0
    lockfile = tmp_path / render.stack_dir(stack) / locks.CONDA_LOCK_FILE
    lockfile.unlink()
    capsys.readouterr()
    rc = cli.main(["lock", "--catalog", str(path), "--stack", stack.name, "--conda-only"])
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("filtered out line")]
    assert rc == locks.EXIT_NO_CONDA
    assert not lockfile.exists()
    assert err[-1] == ("verlenv lock: verl-0.7: cannot solve the conda layer for linux-64: no record of cuda-cccl in "
                       "locks/conda-forge for linux-64; add a public lock file that has it to "
                       "locks/conda-forge/sources.toml and run `verlenv conda-snapshot`; "
                       "no conda-lock.yml was written for verl-0.7")


def test_cuda_12_8_stack_lock_is_fresh_and_holds_the_toolkit(capsys):
    stack = CATALOG.stack("verl-0.7")
    capsys.readouterr()
    rc = cli.main(["lock", "--check", "--catalog", str(ROOT / "stacks.toml"), "--stack", stack.name])
    assert rc == 0, capsys.readouterr().err
    from conda_lock.lockfile import parse_conda_lock_file

    locked = parse_conda_lock_file(ROOT / render.stack_dir(stack) / locks.CONDA_LOCK_FILE)
    conda = {p.name: p for p in locked.package if p.manager == "conda"}
    assert {p.platform for p in conda.values()} == {"linux-64"}
    for name in ("cuda-version", "cuda-nvcc", "cuda-cudart-dev", "cuda-cccl_linux-64", "cuda-nvrtc-dev",
                 "cuda-profiler-api"):
        assert conda[name].version.startswith("12.8"), name
    # The -dev libraries are unpinned in stacks.toml; cuda-version 12.8 must pick their CUDA 12.8 builds.
    assert {n: conda[n].version for n in ("libcublas-dev", "libcusparse-dev", "libcusolver-dev", "libcurand-dev")} == {
        "libcublas-dev": "12.8.4.1", "libcusparse-dev": "12.5.8.93", "libcusolver-dev": "11.7.3.90",
        "libcurand-dev": "10.3.9.90"}
    provenance = json.loads((ROOT / conda_layer.SNAPSHOT_DIR / "provenance.json").read_text())
    assert min(len({s["repo"] for s in provenance[p.url]["sources"]}) for p in conda.values()) >= 2


@pytest.mark.network
@pytest.mark.slow
def test_lock_without_a_channel_rewrites_the_committed_file(tmp_path, monkeypatch):
    path = project_copy(tmp_path)
    monkeypatch.setattr(locks, "conda_unreachable", lambda: "test: no channel")
    (tmp_path / locks.CONDA_LOCK_FILE).unlink()
    assert cli.main(["lock", "--catalog", str(path), "--stack", STACK.name, "--conda-only"]) == 0
    assert (tmp_path / locks.CONDA_LOCK_FILE).read_text() == LOCKFILE.read_text()
    assert not list(tmp_path.glob(".conda-lock-*"))


def test_pip_takes_the_best_wheel_pip_would_install_for_the_platform():
    # File names as PyPI lists them; the hashes are test values, the same in the pin and the files.
    names = ["demo-1.0-cp312-cp312-manylinux_2_34_x86_64.whl",
             "demo-1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
             "demo-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", "demo-1.0-cp312-cp312-manylinux_2_28_aarch64.whl",
             "demo-1.0-py3-none-any.whl", "demo-1.0-cp311-cp311-manylinux_2_28_x86_64.whl", "demo-1.0.tar.gz"]
    files = [{"filename": n, "url": f"https://files.example/{n}", "hashes": {"sha256": f"{i:064x}"}}
             for i, n in enumerate(names)]
    pin = pins.LockedPin(name="demo", version="1.0", hashes=tuple(f"sha256:{i:064x}" for i in range(len(names))))
    assert conda_layer.pick_file(files, pin, "linux-64")["filename"] == "demo-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    assert (conda_layer.pick_file(files, pin, "linux-aarch64")["filename"]
            == "demo-1.0-cp312-cp312-manylinux_2_28_aarch64.whl")
    # a file whose sha256 the lock line does not list is never taken
    only_some = pins.LockedPin(name="demo", version="1.0", hashes=(f"sha256:{1:064x}", f"sha256:{6:064x}"))
    assert conda_layer.pick_file(files, only_some, "linux-64")["filename"].endswith("manylinux2014_x86_64.whl")
    assert conda_layer.pick_file(files, only_some, "linux-aarch64")["filename"] == "demo-1.0.tar.gz"
    assert conda_layer.pick_file(files, pins.LockedPin("demo", "1.0", ()), "linux-64") is None
    # A group locked for glibc 2.34 (sglang's) takes the 2_34 wheel; at 2.28 it is never taken.
    assert conda_layer.pick_file(files, pin, "linux-64", glibc="2.34")["filename"] == names[0]
    newest = pins.LockedPin(name="demo", version="1.0", hashes=(f"sha256:{0:064x}",))
    assert conda_layer.pick_file(files, newest, "linux-64") is None
    assert conda_layer.pick_file(files, newest, "linux-64", glibc="2.34")["filename"] == names[0]


def test_a_second_base_variant_has_a_conda_lock_file_of_its_own():
    """sglang's group: its own conda-lock file, its whole lock in category main, the wheels of its glibc (2.34)."""
    group = render.groups(STACK)[1]
    from conda_lock.lockfile import parse_conda_lock_file

    locked = parse_conda_lock_file(ROOT / group.lock_file)
    assert (group.lock_file, locked.metadata.platforms) == ("conda-lock.sglang.yml", ["linux-64"])
    assert {c for p in locked.package for c in p.categories} == {"main"}
    pip = {p.name: p for p in locked.package if p.manager == "pip"}
    assert set(pip) == set(pins.read_lock(pins.lock_path(ROOT, group.base)))
    assert pip["sglang"].url.endswith("/sglang-0.5.12-cp312-cp312-manylinux_2_34_x86_64.whl")
    assert pip["torch"].url.endswith("-cp312-cp312-manylinux_2_28_x86_64.whl")  # the newest tag pip would take


def test_an_index_that_does_not_answer_is_one_line(monkeypatch):
    monkeypatch.setattr(conda_layer, "SIMPLE_JSON", "https://127.0.0.1:9/simple/{name}/")  # nothing listens there
    monkeypatch.setattr(conda_layer.time, "sleep", lambda seconds: None)
    with pytest.raises(UserError) as e:
        conda_layer.pypi_files.__wrapped__("torch")
    assert str(e.value).startswith("PyPI's index did not answer for torch (")
    assert str(e.value).endswith("); no conda-lock.yml was written") and len(str(e.value).splitlines()) == 1
