"""The builder: compile a recipe's package against the env's own torch, once per ABI fingerprint."""

import fcntl
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from verlenv import cubins, validate
from verlenv.catalog import stacks
from verlenv.errors import UserError
from verlenv.native import recipes, toolchain, wheelcache
from verlenv.native.ninja_stats import ninja_logs, ninja_stats, units_done
from verlenv.native.parallelism import mem_available_gib, parallelism_for, split_jobs
from verlenv.native.proctree import run_logged

# Run in the env: which of the named distributions it lacks.
_MISSING = Path(__file__).with_name("env_programs") / "missing_distributions.py"
# Run in the env: imports torch, then each named module.
_IMPORT_MODULES = _MISSING.with_name("import_modules.py")


@dataclass(frozen=True)
class BuildResult:
    """The record of one build: its wheel, cache key, whether the cache served it, and the cache entry's record."""
    package: str
    wheel: Path
    fingerprint: str
    cached: bool
    record: dict


def fingerprint_inputs(recipe: recipes.Recipe, version: str, source_id: str, info: toolchain.TorchInfo,
                       archs: list[str], nvcc: str | None = None) -> dict:
    """Everything that changes the binary's ABI or content; any change means a rebuild.

    The nvcc's major.minor is an input only where it differs from torch's CUDA (a same-major toolkit): an nvcc
    equal to torch's CUDA is already named by "cuda", so every build made that way keeps the fingerprint it had
    before the nvcc could differ, and its cache entry stays valid.
    """
    inputs = {
        "package": recipe.package,
        "version": version,
        "source": source_id,
        "torch": info.torch,
        "cuda": info.cuda,
        "python_tag": info.python_tag,
        "cxx11_abi": info.cxx11_abi,
        "archs": sorted(archs),
        "recipe": recipe.digest,
    }
    if nvcc is not None and nvcc != ".".join((info.cuda or "").split(".")[:2]):
        inputs["nvcc"] = nvcc
    return inputs


class MemorySampler(threading.Thread):
    """Samples MemAvailable to report the build's peak memory (all its processes together)."""

    def __init__(self, interval: float = 1.0):
        super().__init__(daemon=True)
        self.interval, self.start_avail, self.min_avail = interval, mem_available_gib(), mem_available_gib()
        self._halt = threading.Event()  # not _stop: that name is Thread.join's own method

    def run(self):
        while not self._halt.wait(self.interval):
            self.min_avail = min(self.min_avail, mem_available_gib())

    def stop(self) -> float:
        self._halt.set()
        self.join()
        return round(self.start_avail - self.min_avail, 2)


def _tail(log_path: Path, n: int = 25) -> str:
    lines = log_path.read_text(errors="replace").splitlines()
    errors = [line for line in lines if re.search(r"error|Error|Killed|FAILED", line)]
    return "\n".join((errors[-n:] if errors else lines[-n:]))


def _diagnose(log_path: Path) -> str:
    """Ask the doctor about a failed build's log (its knowledge base names the usual causes)."""
    from verlenv.doctor import diagnose_text, format_diagnoses

    return format_diagnoses(diagnose_text(log_path.read_text(errors="replace")))


@dataclass(frozen=True)
class BuildPlan:
    """One planned build: the recipe, the archs asked for and compiled, the toolchain and the cache key."""
    recipe: recipes.Recipe
    python: str
    version: str
    archs: list[str]  # what the user asked for
    built_archs: list[str]  # what is compiled (none for host-only code: one build serves all archs)
    checked_archs: list[str]  # the archs plus the target devices' own, each needing a cubin that runs on it
    info: toolchain.TorchInfo
    toolchain: toolchain.Toolchain
    inputs: dict
    fingerprint: str


@dataclass(frozen=True)
class Jobs:
    """How many compile jobs and nvcc threads a build runs, and why."""
    max_jobs: int
    threads: int
    decided: str
    given: bool  # MAX_JOBS came from the user (a hard total)
    memory_jobs: int
    mem_available_gib: float
    cores: int


def build_one(root: Path, variant: stacks.Variant, package: str, python: str, archs: list[str],
              wheelhouse: Path, work: Path, jobs: int | None = None, threads: int | None = None,
              source: Path | None = None, keep: bool = False, toolkit: Path | None = None,
              devices: list[str] | None = None) -> BuildResult:
    """Build `package` (or take it from the cache). `source`: a local copy of its source (an sdist, a clone, a tar
    a bundle carries); `toolkit`: a CUDA_HOME a bundle carries, used when no CUDA_HOME is set; `devices`: the
    compute capabilities the wheel must run on besides `archs` (a B300's 10.3 for a 10.0 build), checked by the
    arch-family rules."""
    plan = plan_build(root, variant, package, python, archs, work, toolkit, devices)
    if hit := _cache_hit(plan, wheelhouse):
        return hit
    check_requires(plan.recipe, python)
    check_toolkit_headers(plan.recipe, plan.toolchain)  # a cached wheel needs none of them: checked on a miss
    return run_build(plan, wheelhouse, work, _jobs(plan, jobs, threads), source, keep)


def plan_build(root: Path, variant: stacks.Variant, package: str, python: str, archs: list[str], work: Path,
               toolkit: Path | None = None, devices: list[str] | None = None) -> BuildPlan:
    """Check that the variant builds `package` for `archs`, resolve the toolchain, and name the cache key."""
    recipe = recipes.load(root, package)
    wanted = variant.source_build(recipe.package)
    if wanted is None:
        names = ", ".join(b.name for b in variant.source_builds)
        raise UserError(f"{variant.key} does not build {package} from source; it builds: {names}")
    if recipe.gpu_code and not recipe.arch_subset and (unsupported := cubins.uncompilable(recipe.package, archs)):
        raise UserError(f"{recipe.package} compiles for {', '.join(cubins.compiles_for(recipe.package))} only "
                        f"(data/gpu_code.toml [compiles]), not {', '.join(unsupported)}; a later minor of the same "
                        f"major runs the build of its major's arch (10.3 runs 10.0, 12.1 runs 12.0)")
    built_archs = recipe.archs_built(archs) if recipe.gpu_code else []  # host-only code: one build serves all archs
    exact_minor_for = recipe.package if recipe.nvcc_match == "exact" else None  # its build refuses another minor
    info, tc = toolchain.resolve(python, work, exact_minor_for=exact_minor_for, toolkit=toolkit,
                                 link_stub=recipe.libcuda_link_stub)
    fixed = f" (its setup.py compiles {';'.join(built_archs)})" if recipe.fixed_archs else ""
    print(f"verlenv build {recipe.package}: torch {info.torch} CUDA {info.cuda} {info.python_tag} "
          f"cxx11abi={info.cxx11_abi}; archs {';'.join(archs)}{fixed}", file=sys.stderr)
    print(f"  toolchain: {tc.describe()}", file=sys.stderr)
    if tc.warning:
        print(f"  warning: {tc.warning}", file=sys.stderr)
    version = recipe.source.version_for(wanted.version)
    inputs = fingerprint_inputs(recipe, version, recipe.source.source_id(version), info, built_archs, tc.nvcc_version)
    checked = subset_checked(recipe, [*archs, *(d for d in devices or [] if d not in archs)])
    return BuildPlan(recipe, python, version, archs, built_archs, checked, info, tc, inputs,
                     wheelcache.fingerprint(inputs))


def subset_checked(recipe: recipes.Recipe, archs: list[str]) -> list[str]:
    """The archs whose cubins the build must carry: all asked for, or, for a recipe with kernels for some archs only,
    those of them it has kernels for (it carries none for the others, and says so)."""
    if not recipe.arch_subset:
        return archs
    if none := cubins.uncompilable(recipe.package, archs):
        print(f"  {recipe.package} has kernels for {', '.join(cubins.compiles_for(recipe.package))} only: none for "
              f"{', '.join(none)}", file=sys.stderr)
    return [a for a in archs if a not in none]


def _cache_hit(plan: BuildPlan, wheelhouse: Path) -> BuildResult | None:
    package, fp = plan.recipe.package, plan.fingerprint
    try:
        hit = wheelcache.lookup(wheelhouse, package, fp)
    except wheelcache.Corrupt as e:
        print(f"  {e}; rebuilding", file=sys.stderr)
        wheelcache.remove(wheelhouse, package, fp)
        return None
    if not hit:
        return None
    print(f"  cache hit {hit.path} ({hit.wheel.name}): no rebuild", file=sys.stderr)
    return BuildResult(package, hit.wheel, fp, True, hit.record)


def _jobs(plan: BuildPlan, jobs: int | None, threads: int | None) -> Jobs:
    """The user's MAX_JOBS and threads where given (flag or environment), else what memory and cores allow."""
    recipe = plan.recipe
    mem, cores = mem_available_gib(), os.cpu_count() or 1
    # nvcc threads only help when the recipe can pass them on and there is GPU code to split by arch.
    n_archs = len(plan.archs) if recipe.threads_variable and recipe.gpu_code else 1
    par = parallelism_for(recipe.mem_per_job_gib, recipe.mem_per_extra_thread_gib, n_archs, mem, cores)
    given_jobs = jobs or _env_int("MAX_JOBS")
    given_threads = threads or (_env_int(recipe.threads_variable) if recipe.threads_variable else None)
    decided = "given by the user" if given_jobs or given_threads else par.reason
    chosen = Jobs(given_jobs or par.jobs, given_threads or par.threads, decided, bool(given_jobs), par.memory_jobs,
                  mem, cores)
    print(f"  parallelism: MAX_JOBS={chosen.max_jobs}, {recipe.threads_variable or 'threads'}={chosen.threads} "
          f"({decided})", file=sys.stderr)
    return chosen


def run_build(plan: BuildPlan, wheelhouse: Path, work: Path, jobs: Jobs, source: Path | None = None,
              keep: bool = False) -> BuildResult:
    """Run one planned build in a fresh or resumed tree, check its cubins, and cache the wheel with its record."""
    recipe, fp = plan.recipe, plan.fingerprint
    work.mkdir(parents=True, exist_ok=True)
    origin = recipe.source.fetch(plan.version, work, source)  # the verified sdist, the clone holding the commit, ...
    tmp, src, lock = _resumable_tree(work, recipe, fp, origin) if recipe.source.resumable else (None, None, None)
    if tmp is None:
        tmp = Path(tempfile.mkdtemp(dir=work, prefix=f"build-{recipe.package}-{fp[:8]}-"))
        lock = _hold(tmp)
    else:
        print(f"  resuming the stopped build in {tmp}: its sources still match {recipe.source.describe(plan.version)}"
              f", so ninja compiles only the units not yet done ({units_done(src)} done)", file=sys.stderr)
    log_path = tmp / "build.log"
    resumed = src is not None
    try:
        if not resumed:  # a resumed tree was checked against the verified source above
            src = recipe.source.place(origin, tmp / "src")
        env, split = _build_env(plan, jobs)
        wheel, wall, peak = _compile(plan, env, src, tmp, log_path, resumed)
        objects = cubins.wheel_shared_objects(wheel, tmp / "scan")
        _check_cubins(recipe, objects, plan.checked_archs, log_path)
        record = _record(plan, jobs, split, src, objects, wall, peak, resumed)
        # The logs travel with the entry, so its ninja figures can be re-derived per unit later.
        evidence = {"build.log": log_path} | {
            f"ninja/{'__'.join(log.parent.relative_to(src).parts) or 'top'}.ninja_log": log for log in ninja_logs(src)}
        entry = wheelcache.store(wheelhouse, recipe.package, fp, wheel, record, evidence)
        print(f"  built {entry.wheel.name} in {wall / 60:.1f} min; cached at {entry.path}", file=sys.stderr)
        return BuildResult(recipe.package, entry.wheel, fp, False, entry.record)
    finally:
        if keep or (log_path.exists() and not (wheelhouse / recipe.package / fp).exists()):
            resumes = " (the next run resumes it)" if recipe.source.resumable else ""
            print(f"  build tree kept at {tmp}{resumes}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        lock.close()


def _build_env(plan: BuildPlan, jobs: Jobs) -> tuple[dict[str, str], dict]:
    """(the build's environment, how its jobs were split over extensions built at once, if they are)."""
    recipe, tc = plan.recipe, plan.toolchain
    env = {**os.environ, **tc.env, **recipe.env, recipe.jobs_variable: str(jobs.max_jobs)}
    # The env's own tools (ninja, cmake) as if it were activated; the toolchain's nvcc stays first.
    env["PATH"] = f"{tc.cuda_home}/bin:{Path(plan.python).parent}:{env['PATH']}"
    if recipe.gpu_code and recipe.arch_variable:
        env[recipe.arch_variable] = recipe.arch_value(plan.archs)
    if recipe.threads_variable:
        env[recipe.threads_variable] = str(jobs.threads)
    split = {}
    if recipe.concurrent_extensions_variable:
        at_once, per_extension, why = extension_split(recipe, jobs.max_jobs, jobs.given, jobs.memory_jobs, jobs.cores)
        env[recipe.concurrent_extensions_variable], env[recipe.jobs_variable] = str(at_once), str(per_extension)
        print(f"  {recipe.concurrent_extensions_variable}={at_once} extensions at once x "
              f"{recipe.jobs_variable}={per_extension} jobs each ({why})", file=sys.stderr)
        split = {"extensions_at_once": at_once, "jobs_per_extension": per_extension, "split": why}
    env |= _site_paths(recipe, plan.info, env)
    return env, split


def _compile(plan: BuildPlan, env: dict[str, str], src: Path, tmp: Path, log_path: Path,
             resumed: bool) -> tuple[Path, float, float]:
    """(the wheel, wall seconds, peak GiB used) of `pip wheel` on the placed sources; one line naming the cause if
    it fails."""
    recipe = plan.recipe
    cmd = [plan.python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-v",
           *recipe.pip_args, "-w", str(tmp / "dist"), str(src)]
    print(f"  log: {log_path}", file=sys.stderr)
    sampler = MemorySampler()
    sampler.start()
    started = time.time()
    rc = run_logged(cmd, env, log_path, src, append=resumed)
    wall = time.time() - started
    peak = sampler.stop()
    if rc != 0:
        raise UserError(f"building {recipe.package} failed (exit {rc}); full log: {log_path}\n{_tail(log_path)}"
                        + (f"\n{d}" if (d := _diagnose(log_path)) else ""), exit_code=1)
    return next((tmp / "dist").glob("*.whl")), wall, peak


def _record(plan: BuildPlan, jobs: Jobs, split: dict, src: Path, objects: list[Path], wall: float, peak: float,
            resumed: bool) -> dict:
    """What the cache entry says about how its wheel was made."""
    tc = plan.toolchain
    return {
        "inputs": plan.inputs,
        "toolchain": {"cuda_home": tc.cuda_home, "nvcc": tc.nvcc_version, "nvcc_release": tc.nvcc_release,
                      "torch_cuda": tc.torch_cuda, "nvcc_match": tc.match, "warning": tc.warning,
                      "source": tc.source, "host_cxx": f"{tc.host_cxx} {tc.host_cxx_version}"},
        "parallelism": {"max_jobs": jobs.max_jobs, "threads": jobs.threads, "decision": jobs.decided,
                        "mem_available_gib": round(jobs.mem_available_gib, 1), "cores": jobs.cores, **split},
        "wall_s": round(wall, 1),
        # A resumed build: wall_s is this run's; ninja's compile_wall_s sums every run.
        "resumed": resumed,
        "peak_mem_used_gib": peak,
        "max_rss_single_process_gib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2, 2),
        "ninja": ninja_stats(src, jobs.cores),
        "cubins": {Path(o).name: sorted(cubins.cubin_archs(cubins.shared_object_archs(o))) for o in objects},
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def verdicts(package: str, archs: list[str], targets: list, visible: list[tuple[str, str]]) -> list[str]:
    """What a build proves for each target GPU profile: its cubins were checked, its kernels never ran here (a build
    runs none; `verify` on that GPU does). One line per profile whose GPU this machine does not have."""
    sms = ", ".join(f"sm_{a.replace('.', '')}" for a in archs)
    here = {name for name, _ in visible}
    return [f"{package}: built and cubin-checked for {sms}, not run on an {t.title} (run `nox -s verify-{t.key}` "
            "on one)" for t in targets if not any(t.matches(name) for name in here)]


def check_toolkit_headers(recipe: recipes.Recipe, tc: toolchain.Toolchain) -> None:
    """Every CUDA header the recipe's sources need from the toolkit is in this CUDA_HOME, before anything is fetched
    or compiled (a CUDA_HOME of PyPI's wheels has the compiler and the runtime, not every header of a full toolkit)."""
    if missing := toolchain.missing_headers(tc.cuda_home, recipe.toolkit_headers):
        wheels = " ".join(sorted({recipe.toolkit_headers[h] for h in missing}))
        cuda = tc.torch_cuda or tc.nvcc_version
        raise UserError(f"{recipe.package} includes {', '.join(missing)} from the CUDA toolkit (build.toolkit_headers "
                        f"of {recipe.path}), which CUDA_HOME={tc.cuda_home} (from {tc.source}) lacks; install {wheels} "
                        f"of CUDA {cuda} into the env (the variant's lock pins it: `verlenv install` again), or build "
                        f"with a full CUDA {cuda} toolkit (CUDA_HOME=/usr/local/cuda)")


def check_requires(recipe: recipes.Recipe, python: str) -> None:
    """Every distribution of the recipe's build.requires is installed in the env: its build runs there, without
    build isolation, so a missing one would fail (or fall back, as torch does without ninja) mid-compile."""
    if not recipe.requires:
        return
    r = subprocess.run([python, str(_MISSING), *recipe.requires], capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UserError(f"cannot list the distributions installed in {python}: {last}")
    missing = json.loads(r.stdout)
    if missing:
        raise UserError(f"{recipe.package} builds in the env of {python} (no build isolation), which lacks "
                        f"{', '.join(missing)} (build.requires of {recipe.path}); run `verlenv install` again, or "
                        f"install them into that env: uv pip install --python {python} {' '.join(missing)}")


def _hold(tree: Path, wait: bool = True):
    """An exclusive lock on a build tree for as long as the returned file stays open; None if another builder
    holds it and `wait` is False."""
    f = open(tree / ".lock", "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        f.close()
        return None
    return f


def _resumable_tree(work: Path, recipe: recipes.Recipe, fp: str, origin: Path):
    """(tree, its sources, the lock held on it) of a stopped build of the same fingerprint (folder name) whose
    sources still equal the verified source (the sdist, or the files placed under the recipe's tree digest) and that
    no other builder holds, else (None, None, None). ninja then compiles only the missing or stale units (it reruns
    any unit whose command line or headers changed, and any unit a kill cut short, which never reached its log). The
    lock is kept from the check on, so two builders never resume the same tree."""
    for tree in sorted(work.glob(f"build-{recipe.package}-{fp[:8]}-*"), key=lambda p: p.stat().st_mtime, reverse=True):
        if not (tree / "build.log").is_file() or not (tree / "src").is_dir():
            continue
        lock = _hold(tree, wait=False)
        if lock is None:
            continue  # another builder is using it
        if src := recipe.source.intact(origin, tree / "src"):
            return tree, src, lock
        lock.close()
    return None, None, None


def _site_paths(recipe: recipes.Recipe, info: toolchain.TorchInfo, env: dict) -> dict[str, str]:
    """The recipe's site-packages folders, prepended to their search-path variables; each must exist."""
    out = {}
    for var, rels in recipe.site_paths.items():
        folders = [Path(info.purelib) / rel for rel in rels]
        for folder in folders:
            if not folder.is_dir():
                raise UserError(f"{recipe.package} needs {folder} (site-packages/{folder.relative_to(info.purelib)}); "
                                f"install the env's locked packages first (verlenv install)")
        out[var] = ":".join([*map(str, folders), *([env[var]] if env.get(var) else [])])
    return out


def _check_cubins(recipe: recipes.Recipe, objects: list[Path], archs: list[str], log_path: Path) -> None:
    """Every CUDA object must hold a cubin that runs on each arch (its own, or its family's: data/gpu_code.toml); the
    named extensions must be CUDA objects."""
    missing = cubins.missing_archs(objects, archs)
    for module in recipe.extension_modules:
        hits = [o for o in objects if o.name.startswith(module + ".") or o.name.startswith(module + "_")]
        if not hits:
            raise UserError(f"{recipe.package}: the wheel has no {module} extension; log: {log_path}", exit_code=1)
        if recipe.gpu_code and not any(cubins.shared_object_archs(o) for o in hits):
            raise UserError(f"{recipe.package}: {module} carries no GPU code (.nv_fatbin); log: {log_path}",
                            exit_code=1)
    if missing:
        detail = "; ".join(f"{Path(k).name} has no cubin for sm_{', sm_'.join(map(str, v))}"
                           for k, v in missing.items())
        raise UserError(f"{recipe.package}: requested archs missing after the build: {detail}", exit_code=1)


def install_wheel(python: str, wheel: Path, recipe: recipes.Recipe) -> None:
    """Install with no dependency resolution (torch must stay as locked), then import it."""
    if shutil.which("uv"):
        cmd = ["uv", "pip", "install", "--python", python, "--no-deps", "--no-index", "--reinstall", "--no-config"]
    else:  # an env made without uv (e.g. a GPU image's own Python)
        cmd = [python, "-m", "pip", "install", "--no-deps", "--no-index", "--force-reinstall", "--no-input"]
    subprocess.run([*cmd, str(wheel)], check=True)
    modules = [recipe.import_name, *recipe.extension_modules]
    r = subprocess.run([python, str(_IMPORT_MODULES), *modules], capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        from verlenv.doctor import diagnose_text, format_diagnoses

        diagnosis = format_diagnoses(diagnose_text(r.stderr))
        raise UserError(f"{recipe.package} installed but does not import: {last}"
                        + (f"\n{diagnosis}" if diagnosis else ""), exit_code=1)
    print(f"  installed and imported {', '.join(modules)}", file=sys.stderr)


def extension_split(recipe: recipes.Recipe, jobs: int, jobs_given: bool, memory_jobs: int,
                    cores: int) -> tuple[int, int, str]:
    """(extensions at once, jobs per extension, why) for a recipe whose setup.py builds several extensions at once.
    Jobs the user gave are a hard total; the builder's own may go past the cores where memory allows."""
    given_at_once = _env_int(recipe.concurrent_extensions_variable)
    if given_at_once:
        return given_at_once, max(1, jobs // given_at_once), "given by the user"
    if jobs_given:
        return split_jobs(jobs, jobs, jobs)
    return split_jobs(jobs, memory_jobs, cores, recipe.units_per_extension)


def _env_int(name: str | None) -> int | None:
    return validate.env_count(name)
