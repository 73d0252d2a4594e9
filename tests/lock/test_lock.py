"""lock: resolution inputs, `verlenv lock --check` freshness, conda-lock content hashes, real uv runs."""

import json
import re
import shutil
import sys
import tomllib
import urllib.request
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.metadata import Metadata
from packaging.utils import canonicalize_name

from project_files import copy_tree
from verlenv import cli
from verlenv.catalog import pins, stacks
from verlenv.errors import UserError
from verlenv.lock import locks

ROOT = Path(__file__).resolve().parents[2]
STANDIN_UV = ROOT / "tests" / "data" / "programs" / "standin_uv.py"
CATALOG = stacks.load(ROOT / "stacks.toml")


def run_check(path: Path, capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = cli.main(["lock", "--check", "--catalog", str(path), *args])
    return rc, capsys.readouterr().err


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_resolver_input_has_source_builds_but_no_git_urls():
    megatron = CATALOG.variant("verl-0.9", "megatron")
    reqs = locks.resolver_requirements(megatron)
    assert "flash-attn==2.8.3.post2" in reqs and "transformer-engine-torch==2.12.0" in reqs
    assert not any("git+" in r or r.startswith("apex") for r in reqs)
    flags = locks.uv_flags(megatron)
    assert flags[flags.index("--exclude-newer") + 1] == megatron.stack.exclude_newer
    no_emit = [flags[i + 1] for i, f in enumerate(flags) if f == "--no-emit-package"]
    assert no_emit == ["causal-conv1d", "flash-attn", "transformer-engine-torch"]
    assert "--exclude-newer-package" not in flags


def test_each_variant_is_resolved_for_its_own_glibc():
    """sglang 0.5.12 ships manylinux_2_34 wheels only: its variant names glibc 2.34; the others keep 2.28, so their
    recorded inputs (and locks) stay as they were."""
    platform = {v.key: locks.uv_flags(v)[locks.uv_flags(v).index("--python-platform") + 1]
                for v in CATALOG.all_variants()}
    assert platform.pop("verl-0.9-sglang") == "x86_64-manylinux_2_34"
    assert set(platform.values()) == {"x86_64-manylinux_2_28"}
    for variant in CATALOG.all_variants():
        record = json.loads(locks.inputs_path(ROOT, variant).read_text())
        assert record["inputs"]["uv_flags"] == locks.uv_flags(variant)
    sglang = pins.read_lock(pins.lock_path(ROOT, CATALOG.variant("verl-0.9", "sglang")))
    assert sglang["sglang"].version == "0.5.12" and "vllm" not in sglang


@pytest.mark.parametrize("value, complaint", [
    ('"2.x"', "glibc is '2.x'; give a glibc version such as"),
    ("2.34", "glibc is 2.34; give a glibc version such as"),
    ('"2.12"', "glibc is '2.12'"),
])
def test_a_bad_glibc_is_one_line(tmp_path, value, complaint):
    path = copy_tree(tmp_path)
    edit(path, 'glibc = "2.34"', f"glibc = {value}")
    with pytest.raises(UserError) as e:
        stacks.load(path)
    assert f"stacks.verl-0.9.variants.sglang.{complaint}" in str(e.value) and "\n" not in str(e.value)


def test_overrides_are_inherited_recorded_and_validated(tmp_path):
    fsdp, megatron = CATALOG.variant("verl-0.9", "fsdp"), CATALOG.variant("verl-0.9", "megatron")
    assert fsdp.overrides == ()
    # verl's flash-attn pin is replaced by the source build's own.
    assert locks.lock_inputs(fsdp, None)["overrides"] == ["flash-attn==2.8.3.post2",
                                                           "mbridge ; sys_platform == 'never'"]
    assert megatron.overrides == ("transformer-engine-cu12 ; sys_platform == 'never'",)
    assert locks.lock_inputs(megatron, "")["overrides"] == [*megatron.overrides, "apex ; sys_platform == 'never'",
                                                           "flash-attn==2.8.3.post2",
                                                           "mbridge ; sys_platform == 'never'",
                                                           "megatron-bridge ; sys_platform == 'never'"]
    path = copy_tree(tmp_path)
    edit(path, "overrides = [\"transformer-engine-cu12 ; sys_platform == 'never'\"]", 'overrides = ["cu12 >>> 1"]')
    with pytest.raises(UserError) as e:
        stacks.load(path)
    assert "stacks.verl-0.9.variants.megatron.overrides: invalid requirement 'cu12 >>> 1'" in str(e.value)


def test_not_taken_is_inherited_and_validated(tmp_path):
    megatron = CATALOG.variant("verl-0.9", "megatron")
    # fsdp's reasons are inherited; megatron gives mbridge its own.
    assert set(megatron.not_taken) == {"flash-attn", "mbridge", "apex", "megatron-bridge"}
    assert megatron.not_taken["mbridge"] != CATALOG.variant("verl-0.9", "fsdp").not_taken["mbridge"]
    assert megatron.extras("verl") == ("fsdp", "mcore", "megatron", "verl-core", "vllm")
    path = copy_tree(tmp_path)
    edit(path, 'megatron-bridge = "verl', 'megatron-core = "verl')
    with pytest.raises(UserError) as e:
        stacks.load(path)
    assert "stacks.verl-0.9.variants.megatron.not_taken: megatron-core is also in its requirements" in str(e.value)
    path.write_text(re.sub(r'^megatron-core = "verl.*$', 'megatron-bridge = " "', path.read_text(), count=1,
                           flags=re.MULTILINE))
    with pytest.raises(UserError, match=r"megatron.not_taken.megatron-bridge must be a reason \(a non-empty string\)"):
        stacks.load(path)


def test_megatron_api_gaps_are_per_variant_and_validated(tmp_path):
    assert CATALOG.variant("verl-0.9", "fsdp").megatron_api_gaps == {}
    assert all(": megatron.core." in ref for ref in CATALOG.variant("verl-0.9", "megatron").megatron_api_gaps)
    path = copy_tree(tmp_path)
    edit(path, '"verl/utils/checkpoint/megatron_checkpoint_manager.py: '
               'megatron.core.dist_checkpointing.strategies.base.async_calls" =', '"verl/a.py async_calls" =')
    with pytest.raises(UserError, match=r"megatron_api_gaps: 'verl/a.py async_calls' must be "
                                        r"'<file>: megatron.core.<name>'"):
        stacks.load(path)


@pytest.mark.parametrize("text", ["override_transformer_config.attention_backend", "a..b=1", "+=1", "~"])
def test_a_trainer_override_of_the_catalog_must_be_a_hydra_override(tmp_path, text):
    path = copy_tree(tmp_path)
    edit(path, '"actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend=auto" =', f'"{text}" =')
    with pytest.raises(UserError, match=rf"megatron.trainer_overrides: '{re.escape(text)}' is not a Hydra override; "
                                        r"give KEY=VALUE, \+KEY=VALUE"):
        stacks.load(path)


def test_verl_07_exempts_only_flash_attn_from_its_date_cap():
    flags = locks.uv_flags(CATALOG.variant("verl-0.7", "fsdp"))
    exempt = [flags[i + 1] for i, f in enumerate(flags) if f == "--exclude-newer-package"]
    assert exempt == ["flash-attn=2026-10-15T00:00:00Z"]


def test_check_passes_on_the_committed_tree(capsys):
    rc, err = run_check(ROOT / "stacks.toml", capsys)
    assert rc == 0, err
    assert f"{len(CATALOG.all_variants())} lock(s) and their environment files are fresh" in err


def test_check_fails_on_a_hand_edited_lock(tmp_path, capsys):
    path = copy_tree(tmp_path)
    lock_file = pins.lock_path(tmp_path, CATALOG.variant("verl-0.9", "fsdp"))
    first_hash = re.search(r"sha256:([0-9a-f]{64})", lock_file.read_text()).group(1)
    edit(lock_file, first_hash, "0" * 64)
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    assert "locks/verl-0.9-fsdp.linux-64.txt: edited after `verlenv lock` wrote it" in err


def test_check_fails_when_a_lock_pin_changes_under_the_env_files(tmp_path, capsys):
    path = copy_tree(tmp_path)
    for variant in CATALOG.stack("verl-0.7").variants.values():
        edit(pins.lock_path(tmp_path, variant), "\ntorch==2.8.0 ", "\ntorch==2.8.1 ")
    rc, err = run_check(path, capsys, "--stack", "verl-0.7")
    assert rc == locks.EXIT_STALE
    assert "environments/verl-0.7/environment.yml: its pip pins differ from the locks" in err
    assert "not in lock: torch==2.8.0; lock has: torch==2.8.1" in err


def test_check_fails_on_an_edited_env_file(tmp_path, capsys):
    path = copy_tree(tmp_path)
    edit(tmp_path / "environment.megatron.yml", "- megatron-core==0.18.2", "- megatron-core==0.18.0")
    edit(tmp_path / "environments/verl-0.7/environment.yml", "- gxx=13", "- gxx=14")
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    assert "environment.megatron.yml: its pip pins differ from the locks (not in lock: megatron-core==0.18.0" in err
    assert "environments/verl-0.7/environment.yml: differs from what `verlenv render` writes" in err


def test_check_fails_after_a_catalog_edit_without_relock(tmp_path, capsys):
    path = copy_tree(tmp_path)
    edit(path, '"tensordict==0.10.0",', '"tensordict==0.9.1",')
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    for key in ("verl-0.9-fsdp", "verl-0.9-megatron"):
        assert (f"locks/{key}.linux-64.txt: stale, stacks.toml's requirements changed "
                "(+tensordict==0.9.1, -tensordict==0.10.0)") in err
    assert "verl-0.7" not in err


def test_check_fails_after_a_date_cap_edit(tmp_path, capsys):
    path = copy_tree(tmp_path)
    edit(path, 'exclude_newer = "2026-03-18T00:00:00Z"', 'exclude_newer = "2026-03-19T00:00:00Z"')
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    assert "locks/verl-0.7-fsdp.linux-64.txt: stale, its resolver flags changed" in err
    assert "--exclude-newer 2026-03-19T00:00:00Z" in err


def test_check_fails_when_the_base_lock_moved_but_the_extension_did_not(tmp_path, capsys):
    """fsdp relocked (lock + sidecar consistent), megatron not: megatron was resolved against another fsdp."""
    path = copy_tree(tmp_path)
    fsdp = CATALOG.variant("verl-0.9", "fsdp")
    lock_file, side = pins.lock_path(tmp_path, fsdp), locks.inputs_path(tmp_path, fsdp)
    edit(lock_file, "#    nox -s lock\n", "#    nox -s lock\n# relocked\n")
    record = json.loads(side.read_text())
    record["lock_sha256"] = locks._sha256(lock_file.read_text())
    side.write_text(json.dumps(record))
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    assert "verl-0.9-fsdp" not in err.replace("another locks/verl-0.9-fsdp", "")
    assert ("locks/verl-0.9-megatron.linux-64.txt: stale, it was resolved against another "
            "locks/verl-0.9-fsdp.linux-64.txt") in err


def test_check_fails_without_the_inputs_record(tmp_path, capsys):
    path = copy_tree(tmp_path)
    locks.inputs_path(tmp_path, CATALOG.variant("verl-0.7", "megatron")).unlink()
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    assert "locks/verl-0.7-megatron.inputs.json: missing" in err


def test_unknown_stack_or_variant_is_exit_2_listing_the_valid_names(capsys):
    catalog_path = str(ROOT / "stacks.toml")
    assert cli.main(["lock", "--check", "--catalog", catalog_path, "--stack", "verl-9.9"]) == 2
    assert "unknown stack 'verl-9.9'; valid: verl-0.9, verl-0.7" in capsys.readouterr().err
    assert cli.main(["lock", "--check", "--catalog", catalog_path, "--variant", "ddp"]) == 2
    assert "unknown variant 'ddp' of stack verl-0.9; valid: fsdp, megatron" in capsys.readouterr().err


def test_malformed_catalog_names_file_and_key(tmp_path, capsys):
    path = copy_tree(tmp_path)
    edit(path, 'exclude_newer_package = { flash-attn = "2026-10-15T00:00:00Z" }',
         "exclude_newer_package = { flash-attn = 20261015 }")
    assert cli.main(["lock", "--check", "--catalog", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: stacks.verl-0.7.exclude_newer_package.flash-attn must be a date string, got int" in err
    assert len(err.strip().splitlines()) == 1


def test_conda_probe_reports_why_a_channel_is_unreachable():
    assert locks.conda_unreachable("https://127.0.0.1:9/linux-64/repodata.json", timeout=2)


# A conda-lock.yml built through conda-lock's own models and writer: the committed file's packages, with the
# content hash of the given env files.
def fixture_conda_lock_file(folder: Path, sources: list[Path], cuda: str) -> Path:
    from conda_lock.content_hash import compute_content_hashes
    from conda_lock.lockfile import parse_conda_lock_file, write_conda_lock_file
    from conda_lock.lockfile.v2prelim.models import Lockfile, LockMeta
    from conda_lock.src_parser import make_lock_spec
    from conda_lock.virtual_package import default_virtual_package_repodata

    mapping = folder / "empty-mapping.json"
    mapping.write_text("{}")
    spec = make_lock_spec(src_files=sources, mapping_url=str(mapping))
    hashes = compute_content_hashes(spec, default_virtual_package_repodata(cuda_version=cuda))
    mapping.unlink()
    packages = parse_conda_lock_file(ROOT / locks.CONDA_LOCK_FILE).package
    lockfile = Lockfile(package=packages, metadata=LockMeta(content_hash=hashes, channels=spec.channels,
                                                       platforms=spec.platforms, sources=[s.name for s in sources]))
    path = folder / locks.CONDA_LOCK_FILE
    write_conda_lock_file(lockfile, path, metadata_choices=set())
    return path


def test_check_accepts_a_conda_lock_whose_content_hash_matches(tmp_path, capsys):
    path = copy_tree(tmp_path)
    stack = CATALOG.stack()
    fixture_conda_lock_file(tmp_path, [tmp_path / "environment.yml", tmp_path / "environment.megatron.yml"], stack.cuda)
    rc, err = run_check(path, capsys, "--stack", stack.name)
    assert rc == 0, err


def test_check_rejects_a_conda_lock_of_other_specs(tmp_path, capsys):
    path = copy_tree(tmp_path)
    stack = CATALOG.stack()
    other = tmp_path / "other"
    other.mkdir()
    for name in ("environment.yml", "environment.megatron.yml"):
        shutil.copy(tmp_path / name, other / name)
    edit(other / "environment.megatron.yml", "- megatron-core==0.18.2", "- megatron-core==0.15.3")
    fixture = fixture_conda_lock_file(other, [other / "environment.yml", other / "environment.megatron.yml"],
                                      stack.cuda)
    shutil.copy(fixture, tmp_path / locks.CONDA_LOCK_FILE)
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    assert err.splitlines()[0] == ("conda-lock.yml: its linux-64 content hash does not match environment.yml, "
                                   "environment.megatron.yml; run `verlenv lock --conda-only`")
    # the same specs with another CUDA in the virtual packages hash differently too
    fixture_conda_lock_file(tmp_path, [tmp_path / "environment.yml", tmp_path / "environment.megatron.yml"], "12.8")
    assert run_check(path, capsys)[0] == locks.EXIT_STALE
    fixture_conda_lock_file(tmp_path, [tmp_path / "environment.yml", tmp_path / "environment.megatron.yml"], stack.cuda)
    assert run_check(path, capsys)[0] == 0


def test_check_rejects_a_file_that_is_not_a_conda_lock(tmp_path, capsys):
    path = copy_tree(tmp_path)
    (tmp_path / locks.CONDA_LOCK_FILE).write_text("version: 2\npackage: nope\n")
    rc, err = run_check(path, capsys)
    assert rc == locks.EXIT_STALE
    assert "conda-lock.yml: not a conda-lock file (ValidationError" in err


def _torch_metadata(version: str, python_tag: str) -> tuple[Metadata, str]:
    """torch's own METADATA (PEP 658 file beside the wheel on PyPI) and the wheel's sha256."""
    request = urllib.request.Request("https://pypi.org/simple/torch/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as r:
        files = json.load(r)["files"]
    name = f"torch-{version}-{python_tag}-{python_tag}-manylinux_2_28_x86_64.whl"
    wheel = next(f for f in files if f["filename"] == name)
    with urllib.request.urlopen(wheel["url"] + ".metadata", timeout=60) as r:
        return Metadata.from_email(r.read(), validate=False), wheel["hashes"]["sha256"]


@pytest.mark.network
@pytest.mark.parametrize("stack", list(CATALOG.stacks.values()), ids=lambda s: s.name)
def test_cuda_runtime_pins_are_the_ones_torch_declares(stack):
    """No forced overrides: cuDNN, NCCL and the other CUDA wheels are at the versions torch requires."""
    locked = pins.read_lock(pins.lock_path(ROOT, stack.variant("megatron")))
    python_tag = "cp" + stack.python.replace(".", "")
    metadata, wheel_sha = _torch_metadata(locked["torch"].version, python_tag)
    assert f"sha256:{wheel_sha}" in locked["torch"].hashes
    env = default_environment() | {"python_version": stack.python, "python_full_version": stack.python + ".0",
                                   "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}
    declared = {}
    for req in metadata.requires_dist:
        if (req.marker is None or req.marker.evaluate(env | {"extra": ""})) and str(req.specifier).startswith("=="):
            declared[canonicalize_name(req.name)] = str(req.specifier)[2:]
    cuda_libs = {n: v for n, v in declared.items() if n.startswith(("nvidia-", "cuda-"))}
    assert (any(n.startswith("nvidia-cudnn-") for n in cuda_libs)
            and any(n.startswith("nvidia-nccl-") for n in cuda_libs))
    for name, version in {**cuda_libs, "triton": declared["triton"]}.items():
        assert locked[name].version == version, f"{name}: torch declares =={version}, lock has {locked[name].version}"


def _committed_resolvers() -> set[str]:
    return {json.loads(p.read_text())["resolver"] for p in (ROOT / "locks").glob("*.inputs.json")}


def test_the_resolver_group_pins_the_uv_every_committed_lock_was_resolved_with():
    group = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["resolver"]
    pinned = [r.removeprefix("uv==") for r in group if r.startswith("uv==")]
    assert len(pinned) == 1, f"the resolver group pins uv once, exactly: {group}"
    assert _committed_resolvers() == {f"uv {pinned[0]}"}


def _resolving_with_the_committed_uv() -> None:
    """A clear line, not a diff of whole files, where the uv running here is not the one the locks record."""
    running = locks.uv_version(locks.uv_bin())
    recorded = sorted(_committed_resolvers())
    assert [running] == recorded, (f"resolving with {running}; the committed locks record {recorded} (pyproject's "
                                   "resolver group pins it; nox -s tests installs it)")


@pytest.mark.network
@pytest.mark.slow
def test_real_resolution_reproduces_the_committed_lock(tmp_path, capsys):
    _resolving_with_the_committed_uv()
    path = copy_tree(tmp_path)
    fsdp = CATALOG.variant("verl-0.9", "fsdp")
    lock_file = pins.lock_path(tmp_path, fsdp)
    lock_file.write_text("stale\n")
    rc = cli.main(["lock", "--catalog", str(path), "--stack", "verl-0.9", "--variant", "fsdp"])
    err = capsys.readouterr().err
    assert rc == 0, err
    committed = pins.read_lock(pins.lock_path(ROOT, fsdp))
    assert re.search(rf"resolved verl-0.9-fsdp: {len(committed)} pins in [0-9.]+ s", err)
    if locks.conda_unreachable() is not None:
        assert "solving the conda layer against locks/conda-forge" in err
        assert (tmp_path / locks.CONDA_LOCK_FILE).read_text() == (ROOT / locks.CONDA_LOCK_FILE).read_text()
    assert lock_file.read_text() == pins.lock_path(ROOT, fsdp).read_text()
    assert locks.inputs_path(tmp_path, fsdp).read_text() == locks.inputs_path(ROOT, fsdp).read_text()
    assert run_check(path, capsys)[0] == 0


@pytest.mark.network
@pytest.mark.slow
def test_sglang_resolution_reproduces_its_lock_and_its_own_conda_lock(tmp_path, capsys):
    """The sglang variant (manylinux_2_34, its own group): a real uv resolution gives the committed lock again, only it
    is resolved, and the offline conda solve writes conda-lock.sglang.yml as committed, conda-lock.yml untouched."""
    _resolving_with_the_committed_uv()
    path = copy_tree(tmp_path)
    shutil.copy(ROOT / locks.CONDA_LOCK_FILE, tmp_path / locks.CONDA_LOCK_FILE)
    sglang = CATALOG.variant("verl-0.9", "sglang")
    pins.lock_path(tmp_path, sglang).write_text("stale\n")
    rc = cli.main(["lock", "--catalog", str(path), "--stack", "verl-0.9", "--variant", "sglang"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert re.search(r"resolved verl-0.9-sglang: 257 pins in [0-9.]+ s", err) and "resolved verl-0.9-fsdp" not in err
    assert pins.lock_path(tmp_path, sglang).read_text() == pins.lock_path(ROOT, sglang).read_text()
    assert locks.inputs_path(tmp_path, sglang).read_text() == locks.inputs_path(ROOT, sglang).read_text()
    if locks.conda_unreachable() is not None:
        for name in (locks.CONDA_LOCK_FILE, "conda-lock.sglang.yml"):
            assert (tmp_path / name).read_text() == (ROOT / name).read_text(), name
    assert run_check(path, capsys)[0] == 0


@pytest.mark.network
@pytest.mark.slow
def test_megatron_resolution_applies_its_overrides(tmp_path, capsys):
    """transformer-engine-torch 2.12.0's sdist names the cu12 core; the override keeps it out of the real lock."""
    path = copy_tree(tmp_path)
    megatron = CATALOG.variant("verl-0.9", "megatron")
    rc = cli.main(["lock", "--catalog", str(path), "--stack", "verl-0.9", "--variant", "megatron"])
    err = capsys.readouterr().err
    assert rc in (0, locks.EXIT_NO_CONDA), err
    assert "resolved verl-0.9-fsdp" not in err  # the base is fresh: only megatron is resolved
    text = pins.lock_path(tmp_path, megatron).read_text()
    assert text == pins.lock_path(ROOT, megatron).read_text()
    locked = pins.parse_lock(text, "megatron")
    assert "transformer-engine-cu13" in locked and "transformer-engine-cu12" not in locked
    # Without the override the same resolution pulls in the cu12 core next to the cu13 one.
    edit(path, "overrides = [\"transformer-engine-cu12 ; sys_platform == 'never'\"]", "")
    capsys.readouterr()
    cli.main(["lock", "--catalog", str(path), "--stack", "verl-0.9", "--variant", "megatron"])
    assert "transformer-engine-cu12" in pins.parse_lock(pins.lock_path(tmp_path, megatron).read_text(), "megatron")


@pytest.mark.network
@pytest.mark.slow
def test_a_failed_resolution_writes_nothing(tmp_path, capsys):
    """fsdp resolves (to a new lock), megatron cannot: neither committed lock may change."""
    path = copy_tree(tmp_path)
    edit(path, '"psutil",\n    # The CUDA 13.0', '"psutil",\n    "six",\n    # The CUDA 13.0')
    edit(path, '"megatron-core==0.18.2",', '"megatron-core==0.0.1",')
    before = {p: p.read_bytes() for p in (tmp_path / "locks").rglob("*") if p.is_file()}
    rc = cli.main(["lock", "--catalog", str(path), "--stack", "verl-0.9"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "resolved verl-0.9-fsdp" in err
    assert "verlenv lock: uv could not resolve verl-0.9-megatron (exit 1, see above); no lock was written" in err
    assert {p: p.read_bytes() for p in (tmp_path / "locks").rglob("*") if p.is_file()} == before


def test_one_depths_resolutions_run_side_by_side_and_an_extension_after_its_base(tmp_path, monkeypatch):
    """`verlenv lock` of a stack: fsdp's two platforms and sglang (which extends nothing) at once, then megatron's two,
    each constrained by fsdp's lock of its platform. Each stand-in resolution (tests/data/programs/standin_uv.py) holds
    until its siblings have started: run one after another, the first would wait out its guard and fail."""
    path = copy_tree(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    first = ["verl-0.9-fsdp@linux-64", "verl-0.9-fsdp@linux-aarch64", "verl-0.9-sglang@linux-64"]
    uv = tmp_path / "uv"
    uv.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN_UV}" "$@"\n')
    uv.chmod(0o755)
    monkeypatch.setattr(locks, "uv_bin", lambda: str(uv))
    monkeypatch.setenv("STANDIN_UV_DIR", str(marks))
    monkeypatch.setenv("STANDIN_UV_LOCKS", str(ROOT / "locks"))
    monkeypatch.setenv("STANDIN_UV_BESIDE", json.dumps({me: [o for o in first if o != me] for me in first}))
    monkeypatch.setenv("STANDIN_UV_GUARD_S", "120")
    cat = stacks.load(path)

    planned = locks.relock(cat, locks.selected(cat, "verl-0.9", None))

    assert sorted(v.key for v in planned) == ["verl-0.9-fsdp", "verl-0.9-megatron", "verl-0.9-sglang"]
    started = {p.stem: json.loads(p.read_text()) for p in marks.glob("*.started")}
    assert sorted(started) == sorted([*first, "verl-0.9-megatron@linux-64", "verl-0.9-megatron@linux-aarch64"])
    for platform in ("linux-64", "linux-aarch64"):
        megatron = started[f"verl-0.9-megatron@{platform}"]
        assert f"verl-0.9-fsdp@{platform}" in megatron["finished"] and "--constraints" in megatron["argv"]
    for v in planned:
        for platform in v.platforms:
            assert pins.lock_path(tmp_path, v, platform).read_text() == pins.lock_path(ROOT, v, platform).read_text()
