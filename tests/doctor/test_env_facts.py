"""Env facts of a `--system-site-packages` venv (packages added over a base install, as over an NGC torch):
the facts and the file probe see what the interpreter imports, the base's packages included, and a name
installed in both counts once, as the venv's copy that shadows the base's.

The base is a real interpreter prefix of its own (the test's Python, its binary copied and its standard
library linked into a temp folder, with an empty site-packages), so packages can be installed into it
without touching any installed Python.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verlenv.doctor import facts as facts_mod
from verlenv.verify import static
from verlenv.verify.runner import installed_versions

VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"


def base_prefix(folder: Path) -> Path:
    """A Python prefix at folder: this interpreter's binary and stdlib, its own empty site-packages."""
    real = Path(sys.base_prefix)
    (folder / "bin").mkdir(parents=True)
    # A copy, not a link: Python finds its prefix from where the binary is.
    shutil.copy2(os.path.realpath(sys._base_executable), folder / "bin" / VERSION)
    (folder / "lib" / VERSION / "site-packages").mkdir(parents=True)
    for entry in (real / "lib").glob("libpython*"):
        os.symlink(entry, folder / "lib" / entry.name)  # where a binary linked to $ORIGIN/../lib finds it
    for entry in (real / "lib" / VERSION).iterdir():
        if entry.name != "site-packages":
            os.symlink(entry, folder / "lib" / VERSION / entry.name)
    python = folder / "bin" / VERSION
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True).stdout.strip()
    if purelib != str(folder / "lib" / VERSION / "site-packages"):
        pytest.skip(f"this Python's layout puts packages in {purelib or 'an unknown folder'}, not the prefix's "
                    "site-packages")
    return python


def uv_install(python: Path, *requirements: str) -> None:
    subprocess.run(["uv", "pip", "install", "-q", "--python", str(python), "--break-system-packages", *requirements],
                   check=True)


def imported(python: Path, *modules: str) -> dict[str, str]:
    """{module: the folder its import came from}, as the interpreter itself sees it."""
    code = "import importlib, os\n" + "".join(
        f"print(os.path.dirname(importlib.import_module({m!r}).__file__))\n" for m in modules)
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return dict(zip(modules, out))


@pytest.fixture(scope="module")
def overlay(tmp_path_factory):
    """base: six 1.16.0 and idna; venv over it (--system-site-packages): six 1.17.0 only."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONNOUSERSITE", "1")  # the user's ~/.local site would add packages neither layer installed
        root = tmp_path_factory.mktemp("overlay")
        base = base_prefix(root / "base")
        uv_install(base, "six==1.16.0", "idna==3.10")
        subprocess.run([str(base), "-m", "venv", "--system-site-packages", "--without-pip", str(root / "venv")],
                       check=True)
        python = root / "venv" / "bin" / "python"
        uv_install(python, "six==1.17.0")
        yield base, python


def site(python_or_prefix: Path) -> str:
    return str(python_or_prefix.parent.parent / "lib" / VERSION / "site-packages")


@pytest.mark.network
def test_facts_see_the_base_packages_the_venv_imports(overlay):
    base, python = overlay
    facts = facts_mod.gather(python)
    assert site(base) in facts.site_packages and site(python) in facts.site_packages
    where = imported(python, "idna", "six")
    assert facts.dist("idna").version == "3.10" and facts.dist("idna").location == site(base)
    assert where["idna"] == site(base) + "/idna"


@pytest.mark.network
def test_a_venv_package_shadows_the_base_one_and_counts_once(overlay):
    base, python = overlay
    facts = facts_mod.gather(python)
    # The interpreter imports the venv's six.py; the base's is never reached.
    assert imported(python, "six")["six"] == site(python)
    assert facts.dist("six").version == "1.17.0" and facts.dist("six").location == site(python)
    assert [(d.name, d.version, d.location) for d in facts.shadowed] == [("six", "1.16.0", site(base))]
    assert installed_versions(facts)["six"] == ["1.17.0"]
    probe = static.probe_files(str(python), ["six", "idna"], [])
    assert [i["version"] for i in probe["intact"]["six"]["installs"]] == ["1.17.0"]
    assert probe["shadowed"] == {"six": [{"version": "1.16.0", "location": site(base)}]}
    # The protected-package check reads the probe: one install, not "installed 2 times".
    r = static.check_protected("six", "torch", probe["intact"]["six"], "1.17.0", static.Scope(frozenset({"torch"})))
    assert r.status == "pass", r.reason
    assert static.check_protected("idna", "torch", probe["intact"]["idna"], "3.10",
                                  static.Scope(frozenset({"torch"}))).status == "pass"


@pytest.mark.network
def test_two_installs_in_one_folder_are_still_both_listed(overlay, tmp_path):
    """Shadowing is between sys.path folders; a second dist-info of the same name in one folder is the
    'one install went over another' failure and must stay visible."""
    base, python = overlay
    venv_site = Path(site(python))
    extra = venv_site / "six-1.15.0.dist-info"
    shutil.copytree(next(venv_site.glob("six-1.17.0.dist-info")), extra)
    (extra / "METADATA").write_text((extra / "METADATA").read_text().replace("Version: 1.17.0", "Version: 1.15.0"))
    try:
        assert sorted(installed_versions(facts_mod.gather(python))["six"]) == ["1.15.0", "1.17.0"]
        probe = static.probe_files(str(python), ["six"], [])
        r = static.check_protected("six", "torch", probe["intact"]["six"], "1.17.0", static.Scope(frozenset({"torch"})))
        assert r.status == "fail" and "installed 2 times" in r.reason
    finally:
        shutil.rmtree(extra)


@pytest.mark.network
def test_a_venv_made_by_another_venvs_python_sees_the_base_not_that_venv(overlay, tmp_path):
    """Python venvs do not nest (cpython#129445): `--system-site-packages` from a venv's interpreter gives
    the base's site-packages, so a package only in the first venv is neither importable nor in the facts."""
    base, _ = overlay
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(tmp_path / "first")], check=True)
    first = tmp_path / "first" / "bin" / "python"
    uv_install(first, "idna==3.7")
    subprocess.run([str(first), "-m", "venv", "--system-site-packages", "--without-pip", str(tmp_path / "second")],
                   check=True)
    second = tmp_path / "second" / "bin" / "python"
    facts = facts_mod.gather(second)
    assert imported(second, "idna")["idna"] == site(base) + "/idna"
    assert facts.dist("idna").version == "3.10" and site(first) not in facts.site_packages
