"""What a node needs to compile a source-built package itself (flash-attn, apex, TE's torch part) where no index
answers: each verified source as the one file its kind carries (sources/: an sdist, a `git archive` of the
pinned commit, a tar of a local folder) and, optionally, a CUDA_HOME (toolkit/), which the node unpacks into
BUNDLE/.toolkit. `verlenv bundle --build-inputs` writes them; `verlenv build --bundle` builds from them."""

import gzip
import os
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from verlenv import validate
from verlenv.bundle import parts
from verlenv.catalog import stacks
from verlenv.errors import UserError
from verlenv.native import recipes, toolchain
from verlenv.native.sources import reproducible, sha256_file

SOURCE = "source"  # manifest origin of a carried source
TOOLKIT = "toolkit"  # manifest origin of a carried CUDA_HOME
SOURCES_DIR = "sources"
TOOLKIT_FILE = "toolkit/cuda-home.tar.gz"
# Where the node unpacks the toolkit: a dot folder, which neither the parts nor the bundle's file check take in.
TOOLKIT_DIR = ".toolkit"
PROVENANCE = "debian-packages.txt"  # scripts/debian-cuda-home.sh's record of the .debs it unpacked
# gzip(1) -1 packed Debian's CUDA 12.5 (237 MB) to 120 MB in 11 s on the 2-core machine, -6 to 113 MB in 27 s.
GZIP_LEVEL = 1


@dataclass(frozen=True)
class Wanted:
    """A source build whose wheel the bundle does not carry: its recipe, the version built, the variants it serves
    and the local copy given for it (--source NAME=PATH)."""

    recipe: recipes.Recipe
    version: str
    variants: tuple[str, ...]
    given: Path | None


def parse_given(values: list[str]) -> dict[str, Path]:
    """--source NAME=PATH, repeatable -> {canonical name: path}; one line for a malformed or repeated one."""
    out: dict[str, Path] = {}
    for value in values:
        name, eq, path = value.partition("=")
        if not eq or not name.strip() or not path.strip():
            raise UserError(f"--source {value!r}: not NAME=PATH; give e.g. --source apex=/path/to/apex-clone")
        key = canonicalize_name(name.strip())
        if key in out:
            raise UserError(f"--source {name.strip()}: given twice; give one copy per package")
        out[key] = Path(path.strip())
    return out


def wanted(root: Path, variants: list[stacks.Variant], carried: dict[str, set[str]],
           given: dict[str, Path]) -> list[Wanted]:
    """The source builds of `variants` whose wheel is not in `carried` (variant -> names), once each. Checked before
    anything is fetched: every one has a recipe, every given copy has its kind's shape and names one of them, and a
    kind no index reaches (a git commit) has one."""
    found: dict[str, tuple[recipes.Recipe, str, list[str]]] = {}
    for variant in variants:
        for build in variant.source_builds:
            if build.name in carried.get(variant.name, set()):
                continue
            if build.name not in found:
                recipe = recipes.load(root, build.name)
                found[build.name] = (recipe, recipe.source.version_for(build.version), [])
            found[build.name][2].append(variant.name)
    if unknown := sorted(set(given) - set(found)):
        raise UserError(f"--source {unknown[0]}=...: not a source build the bundle leaves out; "
                        f"valid: {', '.join(sorted(found)) or 'none (every wheel is carried)'}")
    out = []
    for name, (recipe, version, serves) in found.items():
        copy = given.get(name)
        if copy is not None:
            recipe.source.check_given(copy, f"--source {name}:")
        elif recipe.source.copy_needed:
            raise UserError(f"--build-inputs: {name} is built from {recipe.source.describe(version)}, which a bundle "
                            f"takes from a local copy; pass --source {name}=<{recipe.source.copy_needed}>")
        out.append(Wanted(recipe, version, tuple(serves), copy))
    return out


def carry_sources(wanted_: list[Wanted], folder: Path, cache: Path) -> list[tuple[Wanted, Path]]:
    """Each wanted source, verified, as the one file its kind carries, in `folder`; each file is then taken back
    and placed as the node will (sha256 or tree digest checked), so a bundle never carries a source that fails."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for w in wanted_:
        source = w.recipe.source
        path = source.carry(w.version, source.fetch(w.version, cache, w.given), folder)
        with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".check-") as tmp:
            source.place(source.fetch(w.version, Path(tmp) / "cache", path), Path(tmp) / "tree")
        print(f"build input: {w.recipe.package} {w.version} ({source.kind}) as {path.name}", file=sys.stderr)
        out.append((w, path))
    return out


def check_toolkit(home: Path) -> tuple[str, str | None]:
    """(major.minor, full release) of a CUDA_HOME's nvcc; one line when it has none that answers."""
    validate.existing_dir(home, "--toolkit")
    nvcc = home / "bin" / "nvcc"
    found = toolchain.nvcc_release(nvcc) if nvcc.is_file() else None
    if found is None:
        raise UserError(f"--toolkit {home}: no bin/nvcc that reports a release; give a CUDA_HOME "
                        "(e.g. /opt/cuda-12.5-debian, made by scripts/debian-cuda-home.sh)")
    return found


def _members(home: Path) -> list[Path]:
    """Every file and link of the toolkit; a link out of it is refused (the node unpacks it elsewhere)."""
    out = []
    for path in sorted(home.rglob("*")):
        if path.is_symlink():
            target = os.readlink(path)
            inside = os.path.normpath(os.path.join(path.parent.relative_to(home), target))
            if os.path.isabs(target) or inside == ".." or inside.startswith("../"):
                raise UserError(f"--toolkit {home}: {path.relative_to(home)} links to {target}, outside the folder; "
                                "a carried CUDA_HOME must be relocatable")
            out.append(path)
        elif path.is_file():
            out.append(path)
    return out


def pack_toolkit(home: Path, dest: Path) -> dict:
    """The CUDA_HOME `home` as a reproducible tar.gz at `dest`; what the manifest records of it."""
    home = Path(home).absolute()
    release = check_toolkit(home)
    members = _members(home)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with (open(dest, "wb") as raw,
          gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=GZIP_LEVEL, mtime=0, filename="") as gz,
          tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar):
        for path in members:
            tar.add(path, arcname=path.relative_to(home).as_posix(), recursive=False, filter=reproducible)
    provenance = home / PROVENANCE
    return {"source": str(home), "nvcc": release[1] or release[0], "files": len(members),
            "debian_packages": provenance.read_text().splitlines() if provenance.is_file() else None}


def check_file(bundle: Path, entry: dict) -> Path:
    """A bundle file, once it is there and matches its manifest entry; else one line (exit 1)."""
    path = bundle / entry["file"]
    if not path.is_file():
        raise UserError(f"{path}: missing; the bundle is incomplete", exit_code=1)
    if path.stat().st_size != entry["size"] or sha256_file(path) != entry["sha256"]:
        raise UserError(f"{path}: sha256 differs from the manifest; the file was altered or truncated", exit_code=1)
    return path


def carried_source(bundle: Path, manifest: dict, recipe: recipes.Recipe, variant: stacks.Variant) -> Path | None:
    """The bundle's file of the source `recipe` pins for `variant`, checked against the manifest; None when the
    variant does not build it (the builder says so). One line when the bundle carries none of it (an older bundle,
    or one made without --build-inputs) or another one than the recipe pins."""
    build = variant.source_build(recipe.package)
    if build is None:
        return None
    want = recipe.source.source_id(recipe.source.version_for(build.version))
    entries = [e for e in manifest["files"] if e["origin"] == SOURCE and e["distribution"] == recipe.package]
    if not entries:
        has_wheel = any(e["origin"] == "built" and e["distribution"] == recipe.package for e in manifest["files"])
        hint = ("it carries its wheel: `verlenv install --bundle` installs it" if has_wheel else
                "make it with `verlenv bundle ... --build-inputs`, or pass --source")
        raise UserError(f"the bundle {bundle} carries no source of {recipe.package}; {hint}")
    entry = next((e for e in entries if e.get("source") == want), None)
    if entry is None:
        raise UserError(f"{bundle} carries {recipe.package} {entries[0]['version']} ({entries[0].get('source')}), "
                        f"not the source {recipe.path} pins ({want}); bundle it again from this checkout")
    return check_file(bundle, entry)


def toolkit_entry(manifest: dict) -> dict | None:
    return next((e for e in manifest["files"] if e["origin"] == TOOLKIT), None)


def unpack_toolkit(bundle: Path, manifest: dict) -> Path | None:
    """The bundle's CUDA_HOME, unpacked once into BUNDLE/.toolkit (again when the tar changed); None if it carries
    none. The tar is checked against the manifest first; the folder appears whole, by one rename."""
    entry = toolkit_entry(manifest)
    if entry is None:
        return None
    target = bundle / TOOLKIT_DIR
    stamp = target / ".from-sha256"
    if stamp.is_file() and stamp.read_text().strip() == entry["sha256"]:
        return target
    tar_path = check_file(bundle, entry)
    try:
        with parts.published(target) as tmp, tarfile.open(tar_path) as tar:
            tar.extractall(tmp, filter="data")  # no absolute paths, no `..`, no links out of the folder
            (tmp / stamp.name).write_text(entry["sha256"] + "\n")
    except OSError as e:
        raise UserError(f"cannot unpack the bundle's toolkit into {target} ({e}); the bundle's folder must be "
                        "writable", exit_code=1) from None
    print(f"toolkit: nvcc {entry['version']} unpacked into {target} (verlenv build takes it as CUDA_HOME)",
          file=sys.stderr)
    return target
