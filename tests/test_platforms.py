"""Platforms: which variants are locked for linux-aarch64, the checks that keep platform locks honest,
and install picking this machine's lock."""

import json
import platform
import re
from pathlib import Path

import pytest

from project_files import copy_tree
from verlenv import cli
from verlenv.catalog import pins, stacks
from verlenv.env import install
from verlenv.errors import UserError
from verlenv.lock import locks

ROOT = Path(__file__).resolve().parents[1]
CATALOG = stacks.load(ROOT / "stacks.toml")
FSDP = CATALOG.variant("verl-0.9", "fsdp")
MEGATRON = CATALOG.variant("verl-0.9", "megatron")


def run_check(path: Path, capsys) -> tuple[int, str]:
    capsys.readouterr()
    rc = cli.main(["lock", "--check", "--catalog", str(path)])
    return rc, capsys.readouterr().err


def test_only_verl_09_fsdp_and_megatron_are_locked_for_aarch64():
    assert FSDP.platforms == MEGATRON.platforms == ("linux-64", "linux-aarch64")  # GH200/GB200 run the Megatron actor
    assert CATALOG.variant("verl-0.9", "sglang").platforms == ("linux-64",)
    assert all(v.platforms == ("linux-64",) for v in CATALOG.stack("verl-0.7").variants.values())
    assert sorted(p.name for p in (ROOT / "locks").glob("*.linux-aarch64.txt")) == [
        "verl-0.9-fsdp.linux-aarch64.txt", "verl-0.9-megatron.linux-aarch64.txt"]


@pytest.mark.parametrize("variant", [FSDP, MEGATRON], ids=["fsdp", "megatron"])
def test_aarch64_lock_pins_the_linux_64_versions_and_was_resolved_for_aarch64(variant):
    x86 = pins.read_lock(pins.lock_path(ROOT, variant))
    arm = pins.read_lock(pins.lock_path(ROOT, variant, "linux-aarch64"))
    assert {n: p.version for n, p in arm.items()} == {n: p.version for n, p in x86.items()}
    assert all(p.hashes for p in arm.values())
    record = json.loads(locks.inputs_path(ROOT, variant, "linux-aarch64").read_text())
    flags = record["inputs"]["uv_flags"]
    assert record["platform"] == "linux-aarch64"
    assert flags[flags.index("--python-platform") + 1] == "aarch64-manylinux_2_28"


def test_check_detects_a_tampered_aarch64_lock(tmp_path, capsys):
    path = copy_tree(tmp_path)
    arm = pins.lock_path(tmp_path, FSDP, "linux-aarch64")
    arm.write_text(re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, arm.read_text(), count=1))
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    assert "locks/verl-0.9-fsdp.linux-aarch64.txt: edited after `verlenv lock` wrote it" in err


def test_check_detects_a_missing_aarch64_inputs_record(tmp_path, capsys):
    path = copy_tree(tmp_path)
    locks.inputs_path(tmp_path, FSDP, "linux-aarch64").unlink()
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    assert "locks/verl-0.9-fsdp.linux-aarch64.inputs.json: missing" in err


def test_check_detects_platform_locks_with_different_versions(tmp_path, capsys):
    """The aarch64 lock is re-recorded as if `verlenv lock` wrote it: only the version comparison can object."""
    path = copy_tree(tmp_path)
    arm, side = pins.lock_path(tmp_path, FSDP, "linux-aarch64"), locks.inputs_path(tmp_path, FSDP, "linux-aarch64")
    text = arm.read_text().replace("\nnumpy==2.3.5 ", "\nnumpy==2.3.4 ")
    assert text != arm.read_text()
    arm.write_text(text)
    record = json.loads(side.read_text())
    record["lock_sha256"] = locks._sha256(text)
    side.write_text(json.dumps(record))
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    # (megatron's aarch64 lock, resolved against fsdp's, is reported stale beside it.)
    problems = [line for line in err.splitlines() if line.startswith("locks/verl-0.9-fsdp.linux-aarch64.txt")]
    assert len(problems) == 1, err
    assert problems[0].startswith("locks/verl-0.9-fsdp.linux-aarch64.txt: pins other versions than "
                                  "verl-0.9-fsdp.linux-64.txt (numpy 2.3.5 vs 2.3.4)")


def test_version_differences_names_changed_and_one_sided_packages():
    x86 = pins.parse_lock("a==1\nb==2\nc==3\n")
    arm = pins.parse_lock("a==1\nb==2.1\nd==4\n")
    assert locks.version_differences(x86, arm) == ["b 2 vs 2.1", "c only in the linux-64 lock", "d only in this lock"]
    assert locks.version_differences(x86, x86) == []


def test_check_wants_a_lock_for_a_newly_listed_platform(tmp_path, capsys):
    path = copy_tree(tmp_path)
    text = path.read_text()
    old = '[stacks."verl-0.7"]\n'
    assert old in text
    path.write_text(text.replace(old, old + 'platforms = ["linux-64", "linux-aarch64"]\n', 1)
                    .replace('# torch 2.8.0\'s manylinux aarch64 wheel on PyPI is CPU-only: no coherent CUDA env on '
                             'aarch64.\nplatforms = ["linux-64"]\n', ""))
    assert stacks.load(path).variant("verl-0.7", "fsdp").platforms == ("linux-64", "linux-aarch64")
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    assert "locks/verl-0.7-fsdp.linux-aarch64.txt: missing; run `verlenv lock --stack verl-0.7 --variant fsdp`" in err


@pytest.mark.parametrize("table, expected", [
    ('platforms = ["linux-64", "osx-arm64"]',
     "stacks.verl-0.9.platforms: unknown platform 'osx-arm64'; valid: linux-64, linux-aarch64"),
    ('platforms = ["linux-aarch64"]', "stacks.verl-0.9.platforms must include linux-64"),
    ('platforms = "linux-64"', "stacks.verl-0.9.platforms must be a list, got str"),
])
def test_catalog_rejects_bad_platforms_in_one_line(tmp_path, table, expected):
    path = copy_tree(tmp_path)
    text = path.read_text()
    old = 'platforms = ["linux-64", "linux-aarch64"]'
    assert text.count(old) == 1
    path.write_text(text.replace(old, table))
    with pytest.raises(UserError) as e:
        stacks.load(path)
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_catalog_rejects_a_variant_platform_its_base_lacks(tmp_path):
    path = copy_tree(tmp_path)
    text = path.read_text()
    # The stack (and so fsdp) loses aarch64 while megatron, which inherited it, names it itself.
    text = text.replace('platforms = ["linux-64", "linux-aarch64"]', 'platforms = ["linux-64"]')
    text, n = re.subn(r'(\[stacks."verl-0.9".variants.megatron\]\nextends = "fsdp"\n)',
                      r'\1platforms = ["linux-64", "linux-aarch64"]\n', text)
    assert n == 1
    path.write_text(text)
    with pytest.raises(UserError, match=r"stacks.verl-0.9.variants.megatron.platforms: linux-aarch64 is not a "
                                        r"platform of its base variant fsdp \(linux-64\)"):
        stacks.load(path)


@pytest.fixture
def machine(monkeypatch):
    """Test double for platform.machine(): this machine is x86_64, the aarch64 path needs another answer."""
    def set_machine(name: str) -> None:
        monkeypatch.setattr(platform, "machine", lambda: name)
    return set_machine


def test_install_picks_this_machines_platform_lock(machine):
    machine("aarch64")
    assert install.lock_path(ROOT, FSDP) == ROOT / "locks" / "verl-0.9-fsdp.linux-aarch64.txt"
    machine("x86_64")
    assert install.lock_path(ROOT, FSDP) == ROOT / "locks" / "verl-0.9-fsdp.linux-64.txt"


def test_install_refuses_a_variant_not_locked_for_this_platform(machine, monkeypatch, capsys):
    machine("aarch64")
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("VERLENV_ROOT", raising=False)
    rc = cli.main(["install", "--stack", "verl-0.9", "--variant", "sglang", "--prefix", str(ROOT / "never-created")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == ("verlenv install: verl-0.9-sglang is not locked for linux-aarch64 (this machine); "
                   "it is locked for: linux-64\n")
    assert not (ROOT / "never-created").exists()


def test_install_refuses_a_machine_whose_glibc_is_older_than_the_variants(monkeypatch, capsys):
    """sglang's wheels are manylinux_2_34: RHEL 8's glibc 2.28 is refused in one line, before anything is made."""
    monkeypatch.setattr(install, "machine_glibc", lambda: "2.28")  # test double: this machine has glibc 2.36
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("VERLENV_ROOT", raising=False)
    rc = cli.main(["install", "--stack", "verl-0.9", "--variant", "sglang", "--prefix", str(ROOT / "never-created")])
    assert rc == 2 and capsys.readouterr().err == (
        "verlenv install: verl-0.9-sglang needs glibc >= 2.34 (its wheels are manylinux_2_34); this machine has glibc "
        "2.28: install it on a newer system (RHEL 9, Ubuntu 22.04 or later) or pick another variant\n")
    assert not (ROOT / "never-created").exists()
    assert install.lock_path(ROOT, FSDP).name == "verl-0.9-fsdp.linux-64.txt"  # manylinux_2_28: fine there
    monkeypatch.setattr(install, "machine_glibc", lambda: "2.34")
    assert install.lock_path(ROOT, CATALOG.variant("verl-0.9", "sglang")).name == "verl-0.9-sglang.linux-64.txt"


def test_this_machines_glibc_is_read():
    assert re.fullmatch(r"2\.\d+", install.machine_glibc()), install.machine_glibc()  # Debian 12 here: 2.36


def test_a_bundle_for_an_older_glibc_than_the_variants_is_refused(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("VERLENV_ROOT", raising=False)
    rc = cli.main(["bundle", "--stack", "verl-0.9", "--variant", "sglang", "--glibc", "2.28", "--dry-run"])
    assert rc == 2 and capsys.readouterr().err == (
        "verlenv bundle: --glibc 2.28: verl-0.9-sglang is locked for glibc >= 2.34 (its wheels need it); give "
        "--glibc 2.34 or newer, or another variant\n")
