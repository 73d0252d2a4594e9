"""render: the conda environment files are a pure function of stacks.toml and the locks."""

import shutil
from pathlib import Path

import pytest
import yaml

from project_files import copy_tree
from verlenv import cli
from verlenv.catalog import pins, stacks
from verlenv.errors import UserError
from verlenv.lock import render

ROOT = Path(__file__).resolve().parents[1]
CATALOG = stacks.load(ROOT / "stacks.toml")
STACKS = list(CATALOG.stacks.values())


def test_committed_files_are_what_render_produces():
    want = render.rendered(CATALOG)
    # One file per variant under environments/<stack>/, and the default stack's again at the top.
    assert len(want) == sum(len(s.variants) for s in STACKS) + len(CATALOG.stack().variants)
    for rel, text in want.items():
        assert (ROOT / rel).read_text() == text, f"{rel} is stale: run `verlenv render`"


def test_render_is_deterministic_and_rewrites_nothing_on_a_fresh_tree(tmp_path):
    cat = stacks.load(copy_tree(tmp_path))
    assert render.rendered(cat) == render.rendered(cat)
    assert render.write(cat) == []


def test_render_command_regenerates_deleted_files_identically(tmp_path):
    path = copy_tree(tmp_path)
    (tmp_path / "environment.yml").unlink()
    shutil.rmtree(tmp_path / "environments")
    assert cli.main(["render", "--catalog", str(path)]) == 0
    for rel in render.rendered(CATALOG):
        assert (tmp_path / rel).read_text() == (ROOT / rel).read_text()


def test_top_level_files_are_the_default_stack():
    stack = CATALOG.stack()
    for name in ("environment.yml", "environment.megatron.yml", "environment.sglang.yml"):
        assert (ROOT / name).read_text() == (ROOT / render.stack_dir(stack) / name).read_text()
        assert (ROOT / name).read_text().startswith(render.HEADER + "\n")


@pytest.mark.parametrize("stack", STACKS, ids=lambda s: s.name)
def test_pip_sections_hold_every_locked_pin_exactly_once(stack):
    docs = {v.name: yaml.safe_load((ROOT / render.stack_dir(stack) / render.env_file_name(v)).read_text())
            for v in render.groups(stack)[0].variants}
    pip = {name: next(d["pip"] for d in doc["dependencies"] if isinstance(d, dict)) for name, doc in docs.items()}
    fsdp = pins.read_lock(pins.lock_path(ROOT, stack.variant("fsdp")))
    megatron = pins.read_lock(pins.lock_path(ROOT, stack.variant("megatron")))
    assert pip["fsdp"] == [p.requirement for _, p in sorted(fsdp.items())]
    assert set(pip["fsdp"]).isdisjoint(pip["megatron"])
    assert set(pip["fsdp"]) | set(pip["megatron"]) == {p.requirement for p in megatron.values()}
    assert docs["fsdp"]["category"] == "main" and docs["megatron"]["category"] == "megatron"
    for doc in docs.values():
        assert doc["channels"] == ["conda-forge", "nodefaults"] and doc["platforms"] == stack.all_platforms


def test_a_second_base_variant_is_a_group_of_its_own():
    """sglang extends nothing (its pins differ from fsdp's): its file lists its whole lock in category main, with the
    same thin conda part, for its own platforms, and its own conda-lock file holds it."""
    stack = CATALOG.stack("verl-0.9")
    first, second = render.groups(stack)
    assert [v.name for v in first.variants] == ["fsdp", "megatron"] and first.lock_file == "conda-lock.yml"
    assert [v.name for v in second.variants] == ["sglang"] and second.lock_file == "conda-lock.sglang.yml"
    assert second.env_files == ["environment.sglang.yml"] and second.platforms == ["linux-64"]
    doc = yaml.safe_load((ROOT / render.stack_dir(stack) / "environment.sglang.yml").read_text())
    sglang = pins.read_lock(pins.lock_path(ROOT, stack.variant("sglang")))
    pip = next(d["pip"] for d in doc["dependencies"] if isinstance(d, dict))
    assert pip == [p.requirement for _, p in sorted(sglang.items())]
    assert (doc["name"], doc["category"], doc["platforms"]) == ("verl-0.9-sglang", "main", ["linux-64"])
    assert [d for d in doc["dependencies"] if isinstance(d, str)] == [f"python={stack.python}", "pip",
                                                                      stack.host_compiler]
    # Its pins differ from fsdp's: one conda-lock file could not hold both as categories.
    fsdp = pins.read_lock(pins.lock_path(ROOT, stack.variant("fsdp")))
    assert sglang["flashinfer-python"].version != fsdp["flashinfer-python"].version


@pytest.mark.parametrize("stack", STACKS, ids=lambda s: s.name)
def test_conda_part_is_thin_and_takes_the_toolkit_only_where_pypi_has_none(stack):
    doc = yaml.safe_load((ROOT / render.stack_dir(stack) / "environment.yml").read_text())
    conda = [d for d in doc["dependencies"] if isinstance(d, str)]
    assert conda[:3] == [f"python={stack.python}", "pip", stack.host_compiler]
    assert conda[3:] == (list(stack.toolkit_conda) if stack.toolkit == "conda" else [])
    megatron = yaml.safe_load((ROOT / render.stack_dir(stack) / "environment.megatron.yml").read_text())
    assert [d for d in megatron["dependencies"] if isinstance(d, str)] == []


@pytest.mark.parametrize("stack", STACKS, ids=lambda s: s.name)
def test_conda_lock_reads_both_files_as_one_spec_with_two_categories(stack, tmp_path):
    from conda_lock.src_parser import make_lock_spec

    mapping = tmp_path / "empty-mapping.json"  # keeps conda-lock offline
    mapping.write_text("{}")
    folder = ROOT / render.stack_dir(stack)
    spec = make_lock_spec(src_files=[folder / "environment.yml", folder / "environment.megatron.yml"],
                          mapping_url=str(mapping))
    assert spec.platforms == stack.all_platforms
    assert [c.url for c in spec.channels] == ["conda-forge"]
    megatron = pins.read_lock(pins.lock_path(ROOT, stack.variant("megatron")))
    fsdp = pins.read_lock(pins.lock_path(ROOT, stack.variant("fsdp")))
    for platform in spec.platforms:
        deps = spec.dependencies[platform]
        # A platform the megatron variant is not locked for gets the fsdp pins only (its selector drops the rest).
        want = megatron if platform in stack.variant("megatron").platforms else fsdp
        pip_deps = {d.name: d for d in deps if d.manager == "pip"}
        assert set(pip_deps) == set(want), platform
        assert all(d.version == f"=={want[n].version}" for n, d in pip_deps.items())
        assert {n for n, d in pip_deps.items() if d.category == "megatron"} == set(want) - set(fsdp)
        assert {d.name for d in deps if d.manager == "conda"} >= {"python", "pip"}


def test_locks_that_disagree_on_a_shared_package_cannot_share_one_conda_lock(tmp_path):
    cat = stacks.load(copy_tree(tmp_path))
    variant = cat.variant("verl-0.9", "megatron")
    path = pins.lock_path(cat.root, variant)
    path.write_text(path.read_text().replace("\nnumpy==2.3.5 ", "\nnumpy==2.3.4 "))
    with pytest.raises(UserError, match=r"lock different versions \(numpy 2.3.5 vs 2.3.4\)"):
        render.rendered(cat)


def test_a_missing_lock_is_one_clear_line(tmp_path):
    path = copy_tree(tmp_path)
    pins.lock_path(tmp_path, CATALOG.variant("verl-0.7", "fsdp")).unlink()
    assert cli.main(["render", "--catalog", str(path)]) == 2
