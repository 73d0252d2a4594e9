"""Static checks of an env: what can be known without running a kernel, so they also run on CPU machines.

Each check takes its inputs as arguments (facts of the env, paths, the profile), so tests can run it on
real conditions they create.
"""

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from verlenv import cubins
from verlenv.catalog import packages
from verlenv.catalog.packages import Package
from verlenv.doctor import symbols
from verlenv.env import runtime_env
from verlenv.errors import UserError
from verlenv.verify.results import SKIPPED_BY_REQUEST, CheckResult

CUDART = re.compile(r"^libcudart\.so\.(\d+)")
ENVPROBE = Path(__file__).with_name("envprobe.py")
SHOWN = 5  # names listed in a reason; numbers hold the full lists


@dataclass
class Scope:
    """Which packages count: required ones fail the run, skipped ones were left out on request."""

    required: frozenset[str]
    skipped: frozenset[str] = frozenset()
    only: str | None = None

    def wants(self, package: str) -> bool:
        return self.only is None or package == self.only

    def result(self, name: str, package: str, status: str, reason: str = "", **kw) -> CheckResult:
        required = package == "env" or package in self.required
        if package in self.skipped:
            status, reason, kw = "skip", SKIPPED_BY_REQUEST, {"seconds": kw.get("seconds", 0.0)}
        return CheckResult(name, package, "static", status, reason, required, **kw)


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


def _listed(names, shown: int = SHOWN) -> str:
    names = list(names)
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def probe_files(python: str, intact: list[str], objects: list[str], timeout: float = 120) -> dict:
    """Run envprobe.py in the env: RECORD integrity of `intact`, shared objects of `objects`."""
    cmd = [python, str(ENVPROBE), "--intact", *intact, "--objects", *objects]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"--python {python}: could not list its files ({tail})")
    return json.loads(proc.stdout)


# --- the env's python ---------------------------------------------------------------------------------

def check_python(version: str, stack) -> CheckResult:
    want = stack.python
    ok = version.split(".")[:2] == want.split(".")[:2]
    reason = f"Python {version}" + ("" if ok else f", but stack {stack.name} is built for Python {want}")
    return CheckResult("env/python", "env", "static", "pass" if ok else "fail", reason, True,
                       {"python": version, "stack_python": want})


def check_installed(installed: dict[str, list[str]], scope: Scope, variant: str,
                    unbuilt_ok: frozenset[str] = frozenset()) -> list[CheckResult]:
    """Each package present; `unbuilt_ok`: locally compiled ones that may be absent (no GPU to target yet)."""
    out = []
    for pkg in packages.table().packages.values():
        if not scope.wants(pkg.name):
            continue
        found = [(d, installed[d]) for d in pkg.dists if d in installed]
        if found:
            dist, versions = found[0]
            out.append(scope.result(f"installed/{pkg.name}", pkg.name, "pass", f"{dist} {', '.join(versions)}",
                                    numbers={"dist": dist, "version": versions[0]}))
        elif pkg.name in unbuilt_ok:
            out.append(scope.result(f"installed/{pkg.name}", pkg.name, "skip",
                                    "not built: it is compiled for a GPU target; `nox -s build -- --gpu a100|h100` "
                                    "(no GPU here to verify it on)"))
        elif pkg.name in scope.required:
            out.append(scope.result(f"installed/{pkg.name}", pkg.name, "fail",
                                    f"not installed; the {variant} variant needs it ({' or '.join(pkg.dists)})"))
        else:
            out.append(scope.result(f"installed/{pkg.name}", pkg.name, "skip",
                                    f"not installed (optional for {variant})"))
    return out


def check_runtime_env(python: str | Path, stacks_toml: Path, variant) -> CheckResult:
    """env/runtime-defaults: every default of the variant is in effect in the env (or the user set their own), every
    directory it puts on a search path is there, and a CUDA_HOME it names was assembled."""
    settings = runtime_env.defaults(stacks_toml, variant.stack.name, variant.name)
    name = "env/runtime-defaults"
    if not settings:
        return CheckResult(name, "env", "static", "pass", f"{variant.key} sets no runtime defaults")
    env = runtime_env.probe(python, sorted(settings))
    want = runtime_env.filled(settings, runtime_env.field_values(settings, env["site"], env["prefix"], make=False))
    seen = env["seen"]
    defaults = {n: v for n, v in want.items() if isinstance(v, str)}
    paths = {n: v for n, v in want.items() if isinstance(v, list)}
    missing = [n for n in defaults if seen.get(n) is None]
    missing += [f"{d} on {n}" for n, dirs in paths.items() for d in dirs
                if d not in (seen.get(n) or "").split(os.pathsep)]
    theirs = {n: seen[n] for n, v in defaults.items() if seen.get(n) is not None and seen[n] != v}
    numbers = {"defaults": want, "seen": seen}
    if missing:
        return CheckResult(name, "env", "static", "warn", f"not set in this env: {', '.join(missing)} "
                           f"(no {runtime_env.PTH_NAME}: run `verlenv install` again)", numbers=numbers)
    absent = [v for n, v in defaults.items() if n not in theirs and "cuda_home" in runtime_env.fields_used(
        {n: settings[n]}) and not (Path(v) / "bin" / "nvcc").exists()]
    if absent:
        return CheckResult(name, "env", "static", "warn", f"the CUDA_HOME the defaults name is not there: {absent[0]} "
                           "(run `verlenv install` again)", numbers=numbers)
    said = "; ".join(f"{n}={v} set by the user (default {defaults[n]})" for n, v in theirs.items())
    shown = [f"{n}={seen[n]}" for n in sorted(defaults)] + [f"{d} on {n}" for n, dirs in sorted(paths.items())
                                                              for d in dirs]
    return CheckResult(name, "env", "static", "pass", ", ".join(shown) + (f"; {said}" if said else ""),
                       numbers=numbers)


# --- the lock -----------------------------------------------------------------------------------------

def check_lock(installed: dict[str, list[str]], pins: dict, source_builds: dict[str, str | None],
               lock: str, base_others: dict[str, str] | None = None) -> CheckResult:
    """Every installed distribution equals the lock; source builds are expected extras at their pinned version, and
    so are a base env's own distributions at the version its bundle's install recorded (env/base_record.py)."""
    start = time.monotonic()
    differ, missing, unlocked, doubled, from_base = {}, [], [], {}, []
    base_others = base_others or {}
    for name, pin in sorted(pins.items()):
        have = installed.get(name)
        if not have:
            missing.append(name)
        elif _version(have[0]) != _version(pin.version):
            differ[name] = {"installed": have[0], "lock": pin.version}
    for name, versions in sorted(installed.items()):
        if len(versions) > 1:
            doubled[name] = versions
        if name in pins:
            continue
        if name in source_builds:
            want = source_builds[name]
            if want and _version(versions[0]) != _version(want):
                differ[name] = {"installed": versions[0], "source build": want}
            continue
        if name in base_others and _version(versions[0]) == _version(base_others[name]):
            from_base.append(name)
            continue
        unlocked.append(name)
    problems = []
    if differ:
        problems.append(f"{len(differ)} differ ("
                        + _listed(f"{n} {v['installed']}, want {v.get('lock') or v.get('source build')}"
                                  for n, v in differ.items())
                        + ")")
    if missing:
        problems.append(f"{len(missing)} missing ({_listed(missing)})")
    if unlocked:
        problems.append(f"{len(unlocked)} not in the lock ({_listed(unlocked)})")
    if doubled:
        problems.append(f"{len(doubled)} installed twice ({_listed(f'{n} {v}' for n, v in doubled.items())})")
    numbers = {"lock": lock, "locked": len(pins), "installed": len(installed), "differ": differ, "missing": missing,
               "unlocked": unlocked, "installed_twice": doubled, "from_base": from_base}
    reason = "; ".join(problems) if problems else f"{len(pins)} pins match {lock}"
    if from_base:
        reason += f"; {len(from_base)} others are the base env's, as its bundle's install recorded them"
    return CheckResult("lock/match", "env", "static", "fail" if problems else "pass", reason, True, numbers,
                       round(time.monotonic() - start, 3))


def check_protected(name: str, package: str, probe: dict | None, pin_version: str | None,
                    scope: Scope) -> CheckResult:
    """torch, cuDNN, NCCL: the locked version, installed once, no file changed or owned by another package."""
    check = f"intact/{name}"
    if probe is None:
        return scope.result(check, package, "fail" if pin_version else "skip",
                            f"not installed (lock: {pin_version})" if pin_version else "not installed")
    versions = [i["version"] for i in probe["installs"]]
    problems = []
    if len(versions) > 1:
        problems.append(f"installed {len(versions)} times ({', '.join(versions)}): another install went over it")
    if pin_version and _version(versions[0]) != _version(pin_version):
        problems.append(f"version {versions[0]}, lock {pin_version}")
    if probe["claimed_by"]:
        problems.append("files overwritten by " + _listed(f"{k} ({v} files)" for k, v in probe["claimed_by"].items()))
    if probe["changed_count"]:
        problems.append(f"{probe['changed_count']} files changed size since install, e.g. {probe['changed'][0]}")
    if probe["missing_count"]:
        problems.append(f"{probe['missing_count']} files missing, e.g. {probe['missing'][0]}")
    numbers = {"version": versions[0], "lock": pin_version, "files": probe["files"], "claimed_by": probe["claimed_by"],
               "changed": probe["changed"], "missing": probe["missing"]}
    if problems:
        return scope.result(check, package, "fail", f"{name}: " + "; ".join(problems), numbers=numbers)
    return scope.result(check, package, "pass", f"{name} {versions[0]}: {probe['files']} files as installed",
                        numbers=numbers)


def check_locked_files(python: str, names: list[str]) -> CheckResult:
    """Every file of every locked distribution has the size and sha256 its RECORD holds."""
    from verlenv.env import installed_files

    scan = installed_files.check(python, names, reuse=True)
    damaged = {n: why for n, e in sorted(scan["dists"].items()) if (why := installed_files.damaged(e))}
    numbers = {"distributions": len(scan["dists"]), "files": scan["files"], "bytes": scan["bytes"],
               "damaged": damaged, "reused": len(scan["reused"])}
    if damaged:
        reason = (f"{len(damaged)} of {len(scan['dists'])} locked distributions differ from their RECORD ("
                  + _listed(f"{n}: {why}" for n, why in damaged.items()) + "); `verlenv install` reinstalls them")
        return CheckResult("intact/locked-files", "env", "static", "fail", reason, True, numbers, scan["seconds"])
    reused = (f" ({len(scan['reused'])} distributions unchanged since install hashed them: same RECORD, every file "
              "of the same size, mtime and ctime)" if scan["reused"] else "")
    return CheckResult("intact/locked-files", "env", "static", "pass",
                       f"{scan['files']} files of {len(scan['dists'])} locked distributions as installed{reused}", True,
                       numbers, scan["seconds"])


# --- pip check ----------------------------------------------------------------------------------------

def check_pip(python: str, has_pip: bool, timeout: float = 120, overridden: dict[str, str] | None = None,
              unmet: dict[tuple[str, str], str] | None = None) -> CheckResult:
    """The env's declared requirements are satisfied (`python -m pip check`, else `uv pip check`), except those on a
    distribution the variant's lock overrides on purpose (overridden: canonical name -> the stacks.toml override) and
    those a package's row says the env leaves unmet on purpose (`unmet`: (distribution, requirement) -> why; default:
    the packages table's)."""
    unmet = packages.table().unmet() if unmet is None else unmet
    start = time.monotonic()
    if has_pip:
        cmd, tool = [python, "-m", "pip", "check"], "pip check"
    elif uv := _uv():
        cmd, tool = [uv, "pip", "check", "--python", python], "uv pip check"
    else:
        return CheckResult("env/pip-check", "env", "static", "skip", "neither pip in the env nor uv on PATH", True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "NO_COLOR": "1"})
    lines = [line.strip() for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    seconds = round(time.monotonic() - start, 3)
    if proc.returncode == 0:
        return CheckResult("env/pip-check", "env", "static", "pass", f"{tool}: {lines[-1] if lines else 'ok'}", True,
                           {"tool": tool}, seconds)
    # uv's own lines (which env, how many checked/found) are not problems.
    problems = [line for line in lines if not re.match(r"^((Checked|Found) \d+ |Using Python )", line)]
    expected = {line: why for line in problems if (why := unmet.get(_unmet_requirement(line) or ("", "")))}
    problems = [p for p in problems if p not in expected]
    mislabeled = _mislabeled(python, problems)
    problems = [p for p in problems if p not in mislabeled]
    chosen = {p: overridden[dep] for p in problems if (dep := _unmet_dependency(p)) in (overridden or {})}
    problems = [p for p in problems if p not in chosen]
    numbers = {"tool": tool, "problems": problems, "mislabeled": mislabeled, "expected": expected, "overridden": chosen}
    left_unmet = "; ".join(
        ([f"{len(expected)} requirement(s) left unmet on purpose "
          f"({_listed(sorted({d for d, _ in map(_unmet_requirement, expected)}), 3)}, installed --no-deps)"]
         if expected else [])
        + ([f"only requirements the lock overrides on purpose (stacks.toml: "
            f"{'; '.join(sorted(set(chosen.values())))}): {_listed(list(chosen), 3)}"] if chosen else []))
    if not problems and mislabeled:
        return CheckResult("env/pip-check", "env", "static", "warn",
                           f"{tool}: only wheels whose WHEEL tag names another Python but that hold no Python "
                           f"extension module (nothing of them loads by the interpreter's ABI): "
                           f"{_listed(list(mislabeled.values()), 3)}"
                           + (f"; {left_unmet}" if left_unmet else ""), True, numbers, seconds)
    if not problems:
        return CheckResult("env/pip-check", "env", "static", "pass", f"{tool}: {left_unmet}", True, numbers, seconds)
    return CheckResult("env/pip-check", "env", "static", "fail",
                       f"{tool}: {len(problems)} broken: {_listed(problems, 3)}", True, numbers, seconds)


# The dependency a pip check line says is missing or of another version: pip "x 1.0 requires y, which is not
# installed." / "x 1.0 has requirement y==2, but you have y 3."; uv "The package `x` requires `y>=1`, but it's not
# installed" / "The package `x` requires `y==2`, but `3` is installed".
_UNMET_DEP = re.compile(r"^(?:\S+ \S+ (?:requires|has requirement) |The package `\S+` requires `)"
                        r"(?P<dep>[A-Za-z0-9._-]+)")


def _unmet_dependency(line: str) -> str | None:
    from packaging.utils import canonicalize_name

    match = _UNMET_DEP.match(line)
    return canonicalize_name(match.group("dep")) if match else None


def overridden_names(variant) -> dict[str, str]:
    """canonical name -> the override line, for each distribution the variant's overrides name (stacks.toml)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    return {canonicalize_name(Requirement(line).name): line for line in variant.overrides}


# A declared requirement not met. pip: "X 1.0 requires Y, which is not installed." and "X 1.0 has requirement Y==2,
# but you have Y 3."; uv: "The package `X` requires `Y`, but it's not installed" and "... requires `Y==2`, but `3` is
# installed".
_UNMET = re.compile(r"^(?:(\S+) \S+ (?:requires (.+), which is not installed"
                    r"|has requirement (.+), but you have \S+ \S+)\."
                    r"|The package `([^`]+)` requires `([^`]+)`, but (?:it's not installed|`[^`]+` is installed))$")


def _unmet_requirement(line: str) -> tuple[str, str] | None:
    """(distribution, requirement name) of a pip check line about an unmet requirement, else None."""
    if not (m := _UNMET.match(line)):
        return None
    dist, text = m.group(1) or m.group(4), m.group(2) or m.group(3) or m.group(5)
    try:
        return canonicalize_name(dist), canonicalize_name(Requirement(text).name)
    except InvalidRequirement:
        return None


# pip: "X 1.0 is not supported on this platform"; uv: "The package `X` was built for a different platform".
_UNSUPPORTED = re.compile(r"^(?:(\S+) \S+ is not supported on this platform"
                          r"|The package `(\S+)` was built for a different platform)$")
_WHEEL_FACTS = Path(__file__).with_name("env_programs") / "wheel_facts.py"


def _mislabeled(python: str, problems: list[str]) -> dict[str, str]:
    """pip check's "X is not supported on this platform" lines that only mean a wrong interpreter tag in the wheel's
    WHEEL file (transformer-engine-cu13 2.12.0 is named py3-none-manylinux_2_28 but says cp310-cp310 inside): the
    wheel holds no Python extension module, so no interpreter ABI is involved. -> {line: explanation}."""
    flagged = {m.group(1) or m.group(2): line for line in problems if (m := _UNSUPPORTED.match(line))}
    if not flagged:
        return {}
    proc = subprocess.run([python, str(_WHEEL_FACTS), *flagged], capture_output=True, text=True, timeout=60,
                          check=False)
    try:
        facts = json.loads(proc.stdout)
    except ValueError:
        return {}
    return {line: f"{name}: WHEEL says {', '.join(facts[name]['tags'])}, no extension module"
            for name, line in flagged.items()
            if name in facts and facts[name]["tags"] and not facts[name]["extensions"]}


# --- megatron-core API used by the bridges and verl ------------------------------------------------------

# (distribution, its package folder): the code that reaches megatron-core, where installed.
MEGATRON_USERS = (("megatron-bridge", "megatron/bridge"), ("mbridge", "mbridge"), ("verl", "verl"))


def _py_sources(root: Path, package_dir: str) -> dict[str, str]:
    base = root / package_dir
    return {f"{package_dir}/{p.relative_to(base).as_posix()}": p.read_text(errors="replace")
            for p in sorted(base.rglob("*.py"))} if base.is_dir() else {}


def check_megatron_api(facts, gaps: dict[str, str], scope) -> CheckResult | None:
    """Every megatron-core name the bridges (Megatron-Bridge, mbridge) and verl import, or read off a megatron-core
    Enum, exists in the installed megatron-core, except the catalog's reviewed gaps (optional paths). Read from
    source: no GPU, nothing imported."""
    from verlenv.verify import mcore_refs

    core = facts.dist("megatron-core")
    if core is None:
        return None
    start = time.monotonic()
    index = mcore_refs.Index(_py_sources(Path(core.location), "megatron/core"))
    found: dict[str, mcore_refs.Missing] = {}
    users = []
    for dist_name, package_dir in MEGATRON_USERS:
        dist = facts.dist(dist_name)
        if dist is None:
            continue
        users.append(f"{dist_name} {dist.version}")
        for m in mcore_refs.check_package(_py_sources(Path(dist.location), package_dir), index):
            found.setdefault(m.key, m)
    unexpected = [str(m) for key, m in sorted(found.items()) if key not in gaps]
    numbers = {"users": users, "reviewed_gaps": sorted(k for k in found if k in gaps), "unexpected": unexpected}
    seconds = round(time.monotonic() - start, 3)
    required = "megatron-core" in scope.required
    where = f"megatron-core {core.version} against {', '.join(users) or 'no user installed'}"
    if unexpected:
        return CheckResult("megatron-core/api-refs", "megatron-core", "static", "fail",
                           f"{where}: {len(unexpected)} name(s) used but not defined: {_listed(unexpected, 3)}",
                           required, numbers, seconds)
    return CheckResult("megatron-core/api-refs", "megatron-core", "static", "pass",
                       f"{where}: every name used is defined ({len(numbers['reviewed_gaps'])} reviewed gaps on "
                       f"optional paths)", required, numbers, seconds)


def _uv() -> str | None:
    if found := shutil.which("uv"):
        return found
    try:
        from uv import find_uv_bin  # the uv wheel, where the tool was installed with it

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return None


# --- compiled objects: torch symbols and GPU code -------------------------------------------------------

def torch_libraries(torch_lib: Path) -> list[Path]:
    return [torch_lib / n for n in symbols.TORCH_LIBS if (torch_lib / n).is_file()]


def module_name(path: str) -> str:
    return Path(path).name.split(".")[0]


def module_path(record_path: str) -> str:
    """'vllm/_C.abi3.so' -> 'vllm._C'."""
    parts = Path(record_path).parts
    return ".".join([*parts[:-1], module_name(record_path)])


def find_objects(pkg: Package, probed: dict[str, list]) -> list[str]:
    found = []
    for dist, modules in pkg.objects:
        for path, rel in probed.get(dist, []):
            module = module_path(rel)
            if any(module == m or module.endswith("." + m) for m in modules):
                found.append(path)
    return sorted(set(found))


def check_symbols(so: Path, package: str, torch_lib: Path | None, torch_cuda: str | None,
                  scope: Scope) -> CheckResult | None:
    """Torch symbols the object needs that the env's torch does not export: the `undefined symbol` failure,
    found before anything is imported. None when the object does not link torch."""
    start = time.monotonic()
    name = f"symbols/{module_name(str(so))}"
    needed = symbols.needed(so)
    if not any(n.split(".so")[0] + ".so" in symbols.TORCH_LIBS for n in needed):
        return None
    if torch_lib is None or not torch_libraries(torch_lib):
        return scope.result(name, package, "fail", f"{so.name} links torch, but this env has no torch libraries")
    # torch's C++ names and its stable C ABI (aoti_torch_*), which vLLM's *_stable_libtorch objects use.
    wanted = {s for s in symbols.undefined(so) if symbols.TORCH_ABI_SYMBOL.search(s)}
    missing = symbols.unresolved(so, torch_libraries(torch_lib), only=symbols.TORCH_ABI_SYMBOL)
    cudart = [m.group(1) for n in needed if (m := CUDART.match(n))]
    numbers = {"object": str(so), "torch_symbols": len(wanted), "unresolved": missing[:50],
               "unresolved_count": len(missing), "cudart": cudart, "torch_cuda": torch_cuda}
    seconds = round(time.monotonic() - start, 3)
    if missing:
        readable = symbols.demangle(missing[:1])[missing[0]]
        # The line the import would die with: the doctor knows its cause and fix.
        diagnosis = diagnose(f"ImportError: {so}: undefined symbol: {missing[0]}")
        return scope.result(name, package, "fail",
                            f"{len(missing)} of {len(wanted)} torch symbols unresolved, e.g. {readable}: "
                            f"{symbols.abi_hint(missing[0], readable)}", numbers=numbers, seconds=seconds,
                            diagnosis=diagnosis)
    if torch_cuda and cudart and cudart[0] != torch_cuda.split(".")[0]:
        diagnosis = diagnose(f"ImportError: libcudart.so.{cudart[0]}: cannot open shared object file: No such file or "
                             "directory")
        return scope.result(name, package, "fail", f"{so.name} needs libcudart.so.{cudart[0]}, torch is built for CUDA "
                            f"{torch_cuda}: one CUDA major per env", numbers=numbers, seconds=seconds,
                            diagnosis=diagnosis)
    return scope.result(name, package, "pass", f"all {len(wanted)} torch symbols of {so.name} resolve in this torch",
                        numbers=numbers, seconds=seconds)


def cuda_library_dirs(torch_lib: Path | None) -> list[Path]:
    """Where the env's CUDA libraries live: torch/lib and the nvidia-* wheels' lib folders beside it."""
    return symbols.cuda_library_dirs(torch_lib.parent.parent) if torch_lib is not None else []


def check_cuda_symbols(so: Path, package: str, lib_dirs: list[Path], scope: Scope) -> CheckResult | None:
    """Versioned symbols the object needs from the env's own CUDA libraries (cuBLAS, cuDNN, NCCL...) that those
    libraries do not export: a core built against a newer CUDA minor than the one torch pins. None when the
    object needs nothing versioned from a CUDA library this env ships."""
    start = time.monotonic()
    checked, needs, missing = symbols.cuda_library_gaps(so, lib_dirs)
    if not checked:
        return None
    name = f"cudalibs/{module_name(str(so))}"
    numbers = {"object": str(so), "libraries": {lib: str(path) for lib, path in sorted(checked.items())},
               "symbols": sum(len(needs[lib]) for lib in checked), "unresolved": missing}
    seconds = round(time.monotonic() - start, 3)
    if missing:
        lib, names = next(iter(sorted(missing.items())))
        count = sum(len(n) for n in missing.values())
        diagnosis = diagnose(f"OSError: {so}: undefined symbol: {names[0]}, version {lib}")
        return scope.result(name, package, "fail",
                            f"{count} symbol(s) of {so.name} missing from the env's CUDA libraries, e.g. {names[0]} "
                            f"from {lib} ({checked[lib]}): it was built against a newer CUDA library than this env "
                            f"pins", numbers=numbers, seconds=seconds, diagnosis=diagnosis)
    return scope.result(name, package, "pass", f"all {numbers['symbols']} symbols {so.name} takes from "
                        f"{', '.join(sorted(checked))} resolve in this env", numbers=numbers, seconds=seconds)


def arch_support(entries: list, sm: int) -> str:
    """'cubin' (runs natively), 'ptx' (JIT-compiled at first use) or 'none' for GPU arch sm."""
    # SASS runs on the same major at an equal or higher minor; PTX JIT-compiles forward to any newer arch.
    if any(e.kind == "elf" and e.sm // 10 == sm // 10 and e.sm <= sm for e in entries):
        return "cubin"
    if any(e.kind == "ptx" and e.sm <= sm for e in entries):
        return "ptx"
    return "none"


def check_cubins(so: Path, package: str, targets: list[str], strict: bool, scope: Scope) -> CheckResult:
    """GPU code for the target archs. strict: a missing arch fails (a GPU profile); else it warns."""
    start = time.monotonic()
    name = f"cubins/{module_name(str(so))}"
    entries = cubins.shared_object_archs(so)
    seconds = round(time.monotonic() - start, 3)
    if not entries:
        # Host code only (e.g. torch-memory-saver's LD_PRELOAD hooks): no kernel of its own can miss an arch, so the
        # check holds; a skip read as "required check not run" in the verdict.
        return scope.result(name, package, "pass", f"{so.name} holds no GPU code: host code only, no kernel to need "
                            f"an arch", numbers={"object": str(so), "cubin_sm": [], "ptx_sm": []}, seconds=seconds)
    support = {t: arch_support(entries, cubins.sm_of(t)) for t in targets}
    numbers = {"object": str(so), "targets": targets, "cubin_sm": sorted({e.sm for e in entries if e.kind == "elf"}),
               "ptx_sm": sorted({e.sm for e in entries if e.kind == "ptx"}), "support": support}
    none = [t for t, s in support.items() if s == "none"]
    ptx = [t for t, s in support.items() if s == "ptx"]
    if none:
        return scope.result(name, package, "fail" if strict else "warn",
                            f"no code for sm_{'/sm_'.join(t.replace('.', '') for t in none)} in {so.name}: "
                            f"'no kernel image is available' at run time; rebuild with that arch",
                            numbers=numbers, seconds=seconds)
    if ptx:
        return scope.result(name, package, "warn",
                            f"only PTX for sm_{'/sm_'.join(t.replace('.', '') for t in ptx)} in {so.name}: runs "
                            f"after a JIT compile at first use (slow); rebuild with that arch for native code",
                            numbers=numbers, seconds=seconds)
    return scope.result(name, package, "pass",
                        f"native code for sm_{', sm_'.join(t.replace('.', '') for t in targets)}",
                        numbers=numbers, seconds=seconds)


def check_objects(probed: dict[str, list[str]], installed: dict[str, list[str]], torch: dict | None,
                  targets: list[str], strict: bool, scope: Scope) -> list[CheckResult]:
    out = []
    torch_lib = Path(torch["lib"]) if torch else None
    torch_cuda = torch.get("cuda") if torch else None
    lib_dirs = cuda_library_dirs(torch_lib)
    for pkg in packages.table().packages.values():
        if not pkg.objects or not scope.wants(pkg.name):
            continue
        if pkg.name in scope.skipped:
            out.append(scope.result(f"objects/{pkg.name}", pkg.name, "skip"))
            continue
        if not any(d in installed for d in pkg.dists):
            continue  # reported by installed/<package>
        found = find_objects(pkg, probed)
        if not found:
            wanted = sorted({m for _, ms in pkg.objects for m in ms})
            out.append(scope.result(f"objects/{pkg.name}", pkg.name, "fail",
                                    f"installed without its compiled extensions (none of {', '.join(wanted)}): "
                                    "a Python-only or metadata-only install"))
            continue
        for so in map(Path, found):
            if (result := check_symbols(so, pkg.name, torch_lib, torch_cuda, scope)) is not None:
                out.append(result)
            if (result := check_cuda_symbols(so, pkg.name, lib_dirs, scope)) is not None:
                out.append(result)
            out.append(check_cubins(so, pkg.name, targets, strict, scope))
    return out


# --- what a package needs at run time from outside its wheels: system libraries, a JIT toolchain ---------

# Run by the env's own python (its runtime defaults applied, as in verl's workers): which system libraries the loader
# finds, the variables and tools a JIT build reads.
_RUNTIME_PROBE = Path(__file__).with_name("env_programs") / "runtime_probe.py"


def probe_runtime(python: str, libraries: list[str], timeout: float = 60) -> dict:
    """What the env's python sees: {libs: {soname: None or the loader's error}, env: {CUDA_HOME, CXX, PATH...}}."""
    proc = subprocess.run([python, str(_RUNTIME_PROBE), json.dumps(libraries)], capture_output=True, text=True,
                          timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"--python {python}: could not probe its run-time environment ({tail})")
    return json.loads(proc.stdout)


def check_system_libraries(pkg: Package, libs: dict[str, str | None], scope: Scope) -> list[CheckResult]:
    """libs/<soname>: each system library the package's objects need loads by the loader's own search."""
    out = []
    for soname, install in pkg.system_libraries:
        error = libs.get(soname)
        if error is None:
            out.append(scope.result(f"libs/{soname}", pkg.name, "pass", f"{soname} loads (the loader finds it)"))
        else:
            out.append(scope.result(f"libs/{soname}", pkg.name, "fail",
                                    f"{soname} does not load ({error}); {pkg.name} needs it from the system: {install}",
                                    numbers={"error": error}, diagnosis=diagnose(f"ImportError: {error}")))
    return out


def jit_tools(env: dict[str, str | None]) -> dict[str, str | None]:
    """Where a JIT build finds each tool with these variables (tvm-ffi's and FlashInfer's rules): nvcc under
    CUDA_HOME (or CUDA_PATH), else on PATH, else /usr/local/cuda; gcc (nvcc's host compiler) as NVCC_CCBIN names it,
    else on PATH; c++ as CXX names it, else on PATH; ninja on PATH."""
    path = env.get("PATH") or ""

    def which(name: str) -> str | None:
        return name if os.sep in name and os.access(name, os.X_OK) else shutil.which(name, path=path)

    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    nvcc = str(Path(home) / "bin" / "nvcc") if home else (which("nvcc") or "/usr/local/cuda/bin/nvcc")
    ccbin = env.get("NVCC_CCBIN") or "gcc"
    if os.path.isdir(ccbin):
        ccbin = os.path.join(ccbin, "gcc")
    return {"nvcc": nvcc if os.access(nvcc, os.X_OK) else None, "gcc": which(ccbin),
            "c++": which(env.get("CXX") or "c++"), "ninja": which("ninja")}


def _tool_version(tool: str, path: str) -> str | None:
    if tool == "nvcc":
        from verlenv.native import toolchain

        found = toolchain.nvcc_release(Path(path))
        return (found[1] or found[0]) if found else None
    args = ["--version"] if tool == "ninja" else ["-dumpfullversion", "-dumpversion"]
    try:
        proc = subprocess.run([path, *args], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip().splitlines()[0] if proc.returncode == 0 and proc.stdout.strip() else None


def _major(version: str | None) -> int | None:
    head = (version or "").split(".")[0]
    return int(head) if head.isdigit() else None


def check_jit(pkg: Package, env: dict[str, str | None], torch_cuda: str | None, scope: Scope,
              versions=_tool_version) -> CheckResult:
    """jit/<package>: the tools the package's run-time builds call are there as its builds find them, nvcc is of
    torch's CUDA major and accepts the gcc it will call, and that gcc is not older than the package is known to
    compile with (a warning naming the fix)."""
    from verlenv.native import toolchain

    name, jit = f"jit/{pkg.name}", pkg.jit
    found = {t: p for t, p in jit_tools(env).items() if t in jit.tools}
    have = {t: versions(t, p) if p else None for t, p in found.items()}
    numbers = {"tools": found, "versions": have, "cuda_home": env.get("CUDA_HOME"), "torch_cuda": torch_cuda}
    hints = {"nvcc": "set CUDA_HOME to a CUDA toolkit of torch's CUDA (`verlenv install` names the env's own)",
             "gcc": "install gcc/g++ (conda: gxx=13; Debian: g++)", "c++": "install g++ (conda: gxx=13; Debian: g++)",
             "ninja": "put the env's bin (its ninja) on PATH (`verlenv install` writes it into the runtime defaults)"}
    missing = [t for t in jit.tools if not found.get(t) or not have.get(t)]
    if missing:
        return scope.result(name, pkg.name, "fail", f"{pkg.name} compiles kernels at run time, but its builds find no "
                            + "; no ".join(f"{t} ({hints[t]})" for t in missing), numbers=numbers)
    nvcc = ".".join(have["nvcc"].split(".")[:2]) if "nvcc" in have else None  # major.minor, as the table has it
    if nvcc and torch_cuda and _major(nvcc) != _major(torch_cuda):
        return scope.result(name, pkg.name, "fail", f"its builds would use nvcc {have['nvcc']} ({found['nvcc']}), "
                            f"torch is built for CUDA {torch_cuda}: one CUDA major per env; point CUDA_HOME at a CUDA "
                            f"{_major(torch_cuda)}.x toolkit", numbers=numbers)
    gcc = _major(have.get("gcc"))
    limit = toolchain.MAX_GCC_FOR_CUDA.get(nvcc or "")
    if gcc and limit and gcc > limit:
        return scope.result(name, pkg.name, "fail", f"nvcc {have['nvcc']} refuses gcc {have['gcc']} ({found['gcc']}) "
                            f"as its host compiler (gcc <= {limit}); put a gcc {limit} or older first on PATH or name "
                            "it in NVCC_CCBIN", numbers=numbers)
    shown = ", ".join(f"{t} {have[t]}" for t in jit.tools)
    if gcc and jit.min_gcc and gcc < jit.min_gcc:
        return scope.result(name, pkg.name, "warn", f"nvcc's host compiler is gcc {have['gcc']} ({found['gcc']}), "
                            f"older than gcc {jit.min_gcc}: {jit.why}", numbers=numbers)
    return scope.result(name, pkg.name, "pass", f"{shown} (CUDA_HOME={env.get('CUDA_HOME') or 'unset'})",
                        numbers=numbers)


def check_runtime_needs(python: str, installed: dict[str, list[str]], torch: dict | None,
                        scope: Scope) -> list[CheckResult]:
    """The system libraries and JIT toolchains of the installed packages that need them (packages.toml rows)."""
    rows = [p for p in packages.table().packages.values() if (p.system_libraries or p.jit) and scope.wants(p.name)
            and p.name not in scope.skipped and any(d in installed for d in p.dists)]
    if not rows:
        return []
    seen = probe_runtime(python, [lib for p in rows for lib, _ in p.system_libraries])
    out = []
    for pkg in rows:
        out += check_system_libraries(pkg, seen["libs"], scope)
        if pkg.jit:
            out.append(check_jit(pkg, seen["env"], (torch or {}).get("cuda"), scope))
    return out


# --- apex: NVIDIA's, not PyPI's -------------------------------------------------------------------------

def check_apex(facts, scope: Scope) -> CheckResult:
    from verlenv.doctor import probes

    r = probes.probe_apex(facts)
    return from_probe(r, "apex/distribution", "apex", scope)


# --- driver and libcuda ---------------------------------------------------------------------------------

def check_driver(stack, cat, environ: dict) -> tuple[CheckResult, str | None]:
    from verlenv.doctor import probes

    start = time.monotonic()
    driver, names, source = probes.read_driver(environ)
    r = from_probe(probes.probe_driver(driver, names, source, stack, cat), "driver", "env", Scope(frozenset()))
    r.seconds = round(time.monotonic() - start, 3)
    return r, driver


def triton_libcuda_dirs(environ: dict, ldconfig_text: str) -> tuple[list[str], str]:
    """The directories Triton links libcuda.so.1 from, by Triton's own rules, and which rule gave them."""
    if path := environ.get("TRITON_LIBCUDA_PATH"):
        return [path], "TRITON_LIBCUDA_PATH"
    dirs = [os.path.dirname(line.split()[-1]) for line in ldconfig_text.splitlines() if "libcuda.so.1" in line]
    if dirs:
        return dirs, "ldconfig -p"
    ld = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":")
          if d and os.path.exists(os.path.join(d, "libcuda.so.1"))]
    return ld, "LD_LIBRARY_PATH"


def is_stub(path: Path) -> bool:
    # The toolkit's stub carries the same soname but cannot run anything; it lives in .../stubs/.
    return "stubs" in path.resolve().parts or "stubs" in path.parts


def check_libcuda(environ: dict, ldconfig_text: str, driver: str | None, scope: Scope) -> CheckResult:
    name = "triton/libcuda"
    dirs, rule = triton_libcuda_dirs(environ, ldconfig_text)
    found = [Path(d) / "libcuda.so.1" for d in dirs if (Path(d) / "libcuda.so.1").exists()]
    real = [str(p) for p in found if not is_stub(p)]
    stubs = [str(p) for p in found if is_stub(p)]
    numbers = {"rule": rule, "dirs": dirs, "libcuda": real, "stubs": stubs}
    if real:
        return scope.result(name, "triton", "pass", f"{real[0]} (via {rule})", numbers=numbers)
    if driver is None and not stubs and rule != "TRITON_LIBCUDA_PATH":
        return scope.result(name, "triton", "skip", "no NVIDIA driver on this machine", numbers=numbers)
    diagnosis = diagnose("/usr/bin/ld: cannot find -lcuda")
    if stubs:
        return scope.result(name, "triton", "fail", f"Triton would link the stub {stubs[0]} (via {rule}): stubs link "
                            "but cannot run; point TRITON_LIBCUDA_PATH at the driver's directory",
                            numbers=numbers, diagnosis=diagnosis)
    return scope.result(name, "triton", "fail",
                        f"no libcuda.so.1 where Triton looks ({rule}: {', '.join(dirs) or 'nothing'})",
                        numbers=numbers, diagnosis=diagnosis)


def ldconfig_text() -> str:
    for tool in ("/sbin/ldconfig", "ldconfig"):
        try:
            p = subprocess.run([tool, "-p"], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if p.returncode == 0:
            return p.stdout
    return ""


# --- the doctor's words ---------------------------------------------------------------------------------

def diagnose(text: str) -> list[dict]:
    """Known failures the doctor recognises in a failed check's `text`: id, title, cause, fix. Errors only: a warning
    the output also holds (TE's flash-attn range, printed by every healthy megatron run) does not explain the failure,
    and was once named as its cause beside a traceback of another (visit F, 2026-11-28)."""
    from verlenv.doctor import diagnose_text

    return [{"id": d.failure.id, "title": d.failure.title, "cause": d.failure.cause, "fix": list(d.failure.fix)}
            for d in diagnose_text(text) if d.severity == "error"]


def from_probe(r, name: str, package: str, scope: Scope) -> CheckResult:
    """A doctor probe's result as a check."""
    status = {"ok": "pass", "problem": "fail", "skipped": "skip"}[r.status]
    diagnosis = [{"id": r.failure_id, "fix": r.fix}] if r.failure_id else []
    numbers = {k: v for k, v in r.details.items() if isinstance(v, (str, int, float, bool, list, dict, type(None)))}
    return scope.result(name, package, status, r.summary, numbers=numbers, diagnosis=diagnosis)
