"""Each lock carries what verl itself declares for the variant's extras (its wheel's Requires-Dist), except
what stacks.toml lists as not taken, with a reason. A new verl, or a relock that drops one, fails here."""

import hashlib
import io
import json
import os
import urllib.request
import zipfile
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.metadata import Metadata
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from verlenv.catalog import pins, stacks
from verlenv.fsutil import write_atomic

ROOT = Path(__file__).resolve().parents[1]
CATALOG = stacks.load(ROOT / "stacks.toml")
CASES = [(v, p) for v in CATALOG.all_variants() for p in v.platforms]


def cache_dir() -> Path:
    return Path(os.environ.get("VERLENV_TEST_CACHE") or Path.home() / ".cache" / "verlenv-test") / "metadata"


def verl_pin(variant: stacks.Variant) -> str:
    reqs = [Requirement(r) for r in variant.requirements]
    (version,) = {spec.version for req in reqs if canonicalize_name(req.name) == "verl" for spec in req.specifier}
    return version


def wheel_metadata(name: str, version: str, hashes: tuple[str, ...]) -> Metadata:
    """METADATA of the package's py3-none-any wheel on PyPI, which must be a file the lock hashes; cached by sha256."""
    request = urllib.request.Request(f"https://pypi.org/simple/{name}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as r:
        files = json.load(r)["files"]
    wheel = next(f for f in files if f["filename"] == f"{name}-{version}-py3-none-any.whl")
    sha = wheel["hashes"]["sha256"]
    assert f"sha256:{sha}" in hashes, f"{wheel['filename']} (sha256 {sha}) is not a file the lock installs"
    cached = cache_dir() / f"{wheel['filename']}.{sha}.METADATA"
    if not cached.is_file():
        with urllib.request.urlopen(wheel["url"], timeout=120) as r:
            data = r.read()
        assert hashlib.sha256(data).hexdigest() == sha, f"{wheel['filename']}: download does not match PyPI's sha256"
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            write_atomic(cached, z.read(f"{name}-{version}.dist-info/METADATA"))
    return Metadata.from_email(cached.read_bytes(), validate=False)


def marker_env(variant: stacks.Variant, platform: str) -> dict[str, str]:
    python = variant.stack.python
    return default_environment() | {"python_version": python, "python_full_version": python + ".0",
                                    "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                                    "platform_machine": pins.MACHINES[platform], "implementation_name": "cpython",
                                    "platform_python_implementation": "CPython"}


def declared(metadata: Metadata, extras: tuple[str, ...], env: dict[str, str]) -> list[Requirement]:
    """The requirements of the base and the extras, markers evaluated; a self-reference (verl[verl-core])
    adds that extra's requirements in turn."""
    own = canonicalize_name(metadata.name)
    wanted, seen, out = [""] + [canonicalize_name(e) for e in extras], set(), []
    while wanted:
        extra = wanted.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in metadata.requires_dist or []:
            if req.marker is not None and not req.marker.evaluate(env | {"extra": extra}):
                continue
            if req.marker is None and extra:
                continue  # a base requirement: already taken with extra ""
            if canonicalize_name(req.name) == own:
                wanted += [canonicalize_name(e) for e in req.extras]
            else:
                out.append(req)
    return out


def unmet(requirements: list[Requirement], locked: dict[str, pins.LockedPin], variant: stacks.Variant) -> list[str]:
    """Each requirement the lock does not satisfy, unless stacks.toml says why it is not taken."""
    problems = []
    for req in requirements:
        name = canonicalize_name(req.name)
        build = variant.source_build(name)
        if name in variant.not_taken:
            continue
        if build is not None:
            if build.url is None and not req.specifier.contains(build.version, prereleases=True):
                problems.append(f"{req}: the source build is {build.version}; take it or list it as not taken")
        elif name not in locked:
            problems.append(f"{req}: not in the lock")
        elif not req.specifier.contains(locked[name].version, prereleases=True):
            problems.append(f"{req}: the lock has {locked[name].version}")
    return problems


def variant_requirements(variant: stacks.Variant,
                         platform: str) -> tuple[list[Requirement], dict[str, pins.LockedPin]]:
    locked = pins.read_lock(pins.lock_path(ROOT, variant, platform))
    metadata = wheel_metadata("verl", verl_pin(variant), locked["verl"].hashes)
    return declared(metadata, variant.extras("verl"), marker_env(variant, platform)), locked


@pytest.mark.network
@pytest.mark.parametrize(("variant", "platform"), CASES, ids=[f"{v.key}-{p}" for v, p in CASES])
def test_lock_satisfies_what_verl_declares_for_the_variant(variant, platform):
    requirements, locked = variant_requirements(variant, platform)
    assert len(requirements) > 20  # verl's base requirements alone are 18
    assert unmet(requirements, locked, variant) == []
    # Every reason in stacks.toml is about a requirement verl still makes.
    names = {canonicalize_name(r.name) for r in requirements}
    assert sorted(n for n in variant.not_taken if n not in names) == []


@pytest.mark.network
def test_a_lock_that_drops_one_of_verls_requirements_fails():
    fsdp = CATALOG.variant("verl-0.9", "fsdp")
    requirements, locked = variant_requirements(fsdp, "linux-64")
    assert "transferqueue" in {canonicalize_name(r.name) for r in requirements}
    dropped = {n: p for n, p in locked.items() if n != "transferqueue"}
    assert unmet(requirements, dropped, fsdp) == ['TransferQueue>=0.1.10; extra == "verl-core": not in the lock']
    older = dict(locked, transferqueue=pins.LockedPin("transferqueue", "0.1.9", ()))
    assert unmet(requirements, older, fsdp) == ['TransferQueue>=0.1.10; extra == "verl-core": the lock has 0.1.9']


@pytest.mark.network
def test_without_its_reason_the_left_out_flash_attn_pin_fails():
    """verl 0.9.1's fsdp extra pins flash-attn==2.8.3; the stack builds 2.8.3.post2, which == does not admit."""
    fsdp = CATALOG.variant("verl-0.9", "fsdp")
    requirements, locked = variant_requirements(fsdp, "linux-64")
    assert "flash-attn" in fsdp.not_taken
    # The other reasons stay (mbridge's): only flash-attn's is taken away.
    bare = stacks.Variant(stack=fsdp.stack, name=fsdp.name, requirements=fsdp.requirements,
                           source_builds=fsdp.source_builds, platforms=fsdp.platforms,
                           not_taken={n: why for n, why in fsdp.not_taken.items() if n != "flash-attn"})
    assert unmet(requirements, locked, bare) == [
        'flash-attn==2.8.3; extra == "flash-attn-cu130torch211": the source build is 2.8.3.post2; take it or list it '
        'as not taken']


@pytest.mark.network
def test_extras_are_expanded_through_self_references():
    """verl[fsdp] names verl[verl-core]; its requirements count only through that reference."""
    fsdp = CATALOG.variant("verl-0.9", "fsdp")
    locked = pins.read_lock(pins.lock_path(ROOT, fsdp))
    metadata = wheel_metadata("verl", "0.9.1", locked["verl"].hashes)
    env = marker_env(fsdp, "linux-64")
    names = lambda extras: {canonicalize_name(r.name) for r in declared(metadata, extras, env)}  # noqa: E731
    assert "transferqueue" in names(("fsdp",)) and "transferqueue" not in names(())
    assert "trl" in names(("fsdp",)) and "megatron-core" not in names(("fsdp",))
    assert "megatron-core" in names(("megatron",))
