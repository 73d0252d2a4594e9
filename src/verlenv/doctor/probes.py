"""Live probes: what is wrong with an environment before it bites.

Each probe returns ok / problem / warning / skipped (with the reason); a problem or warning names the
knowledge-base id and fix. The probes of what a run meets on its node (glibc, libstdc++, NCCL variables, memory,
Ray's disk, the Megatron bridge) live in node_probes.py; `check_findings` runs the ones a log's findings name.
Probes take their inputs as arguments (facts, environment, paths) so that each can be run on real
conditions in tests; `run_all` gathers those inputs from the machine.
"""

import os
import re
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from verlenv.catalog import pins, stacks as catalog_mod
from verlenv.doctor import node_probes, symbols
from verlenv.doctor.facts import EnvFacts
from verlenv.doctor.probe_result import ProbeResult, ok, problem, skipped, warning
from verlenv.errors import UserError
from verlenv.fsutil import read_text

# Test double: tests set this to stand in for the driver version of a GPU host this machine cannot be.
TEST_DRIVER_ENV = "VERLENV_TEST_DRIVER_VERSION"
# GPUs that can run a newer CUDA on an older driver through the forward-compatibility package.
DATACENTER_GPU = re.compile(r"\b(A100|A800|A30|A40|A10|H100|H800|H200|H20|GH200|B200|B100|GB200|L40S?|L4|V100|T4)\b")
# Ray and vLLM workers start many threads each; below this the per-user limit is hit on big hosts.
MIN_NPROC = 16384
MANY_CORES = 32
KEY_PACKAGES = re.compile(r"^(torch|torchvision|torchaudio|triton|vllm|nvidia-cudnn-cu\d+|nvidia-nccl-cu\d+)$")
RELEASE_TAG = re.compile(r"torch\d{2,3}(?=[-_.])")
LOCK_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def _run(cmd: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, **kw)
    except (FileNotFoundError, PermissionError, subprocess.TimeoutExpired):
        return None


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None



def read_driver(environ: dict) -> tuple[str | None, list[str], str]:
    """(driver version, GPU names, where it was read)."""
    if value := environ.get(TEST_DRIVER_ENV):
        return value, [], f"{TEST_DRIVER_ENV} (test double)"
    gpus: list[str] = []
    smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if smi and (p := _run([smi, "--query-gpu=driver_version,name", "--format=csv,noheader"])) and p.returncode == 0:
        rows = [r.split(",", 1) for r in p.stdout.strip().splitlines() if "," in r]
        if rows:
            return rows[0][0].strip(), [r[1].strip() for r in rows], "nvidia-smi"
    proc = Path("/proc/driver/nvidia/version")
    if proc.is_file() and (version := parse_proc_driver(proc.read_text(errors="replace"))):
        return version, gpus, str(proc)
    return None, gpus, ""


def parse_proc_driver(text: str) -> str | None:
    """Driver version from /proc/driver/nvidia/version (proprietary and open kernel modules)."""
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def probe_driver(driver: str | None, gpus: list[str], source: str, stack, cat) -> ProbeResult:
    name = "driver"
    if stack is None:
        return skipped(name, "no stacks.toml found (run inside a verlenv checkout, set VERLENV_ROOT or pass --stack)")
    if driver is None:
        return skipped(name, "no NVIDIA driver found (no nvidia-smi, no /proc/driver/nvidia/version)")
    have, need = _version(driver), _version(stack.min_driver)
    if have is None:
        return skipped(name, f"cannot read driver version {driver!r} ({source})")
    details = {"driver": driver, "source": source, "stack": stack.name, "cuda": stack.cuda,
               "min_driver": stack.min_driver, "gpus": gpus}
    if have >= need:
        return ok(name, f"driver {driver} >= {stack.min_driver} needed by CUDA {stack.cuda} (stack {stack.name})",
                  **details)
    others = [s.name for s in cat.stacks.values() if s is not stack and (_version(s.min_driver) or need) <= have]
    datacenter = any(DATACENTER_GPU.search(g) for g in gpus)
    major, minor = stack.cuda.split(".")[:2]
    fix = [f"install NVIDIA driver >= {stack.min_driver}"]
    compat = (f"apt install cuda-compat-{major}-{minor} and put /usr/local/cuda-{stack.cuda}/compat first on "
              "LD_LIBRARY_PATH")
    if datacenter:
        fix.append(f"this is a datacenter GPU: CUDA forward compatibility works: {compat}")
    elif not gpus:
        fix.append(f"on datacenter GPUs (A100/H100/H200) CUDA forward compatibility works: {compat}")
    fix += [f"or use stack {o}: verlenv install --stack {o} --variant fsdp" for o in others]
    return problem(name, f"driver {driver} is older than {stack.min_driver}, which CUDA {stack.cuda} "
                         f"(stack {stack.name}) needs", "F15", fix, **details)



def find_nvcc(environ: dict, site_packages: list[str]) -> Path | None:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if (home := environ.get(var)) and (Path(home) / "bin" / "nvcc").is_file():
            return Path(home) / "bin" / "nvcc"
    if found := shutil.which("nvcc", path=environ.get("PATH")):
        return Path(found)
    for sp in site_packages:
        for candidate in sorted(Path(sp).glob("nvidia/cu*/bin/nvcc")):
            return candidate
    return None


def nvcc_release(nvcc: Path) -> str | None:
    p = _run([str(nvcc), "--version"])
    m = re.search(r"release (\d+\.\d+)", p.stdout) if p else None
    return m.group(1) if m else None


def probe_nvcc_vs_torch(torch_cuda: str | None, nvcc: Path | None, have_torch: bool) -> ProbeResult:
    name = "nvcc-vs-torch"
    if not have_torch:
        return skipped(name, "torch is not installed in this environment")
    if torch_cuda is None:
        return skipped(name, "this torch is a CPU build (torch.version.cuda is None)")
    if nvcc is None:
        return skipped(name, "no nvcc (CUDA_HOME unset, none on PATH or in site-packages); building "
                             "flash-attn/apex/TE needs one: verlenv toolchain")
    release = nvcc_release(nvcc)
    if release is None:
        return problem(name, f"{nvcc} --version did not report a release", "F4", nvcc=str(nvcc))
    tmaj, tmin = torch_cuda.split(".")[:2]
    if release.split(".")[:2] == [tmaj, tmin]:
        return ok(name, f"nvcc {release} ({nvcc}) == torch CUDA {torch_cuda}", nvcc=str(nvcc), release=release)
    return problem(name, f"nvcc {release} ({nvcc}) differs from torch CUDA {torch_cuda}; apex refuses any "
                         "major.minor difference", "F5", nvcc=str(nvcc), release=release, torch_cuda=torch_cuda)


def probe_host_compiler(nvcc: Path | None, environ: dict) -> ProbeResult:
    """Ground truth: compile a tiny kernel with this nvcc and the host compiler it would use."""
    name = "host-compiler"
    if nvcc is None:
        return skipped(name, "no nvcc to test the host compiler with")
    ccbin = environ.get("NVCC_CCBIN") or environ.get("CUDAHOSTCXX") or environ.get("CXX")
    compiler = ccbin or shutil.which("c++", path=environ.get("PATH")) or "c++"
    version = _run([compiler, "-dumpfullversion"])
    host = f"{Path(compiler).name} {version.stdout.strip()}" if version and version.returncode == 0 else compiler
    with tempfile.TemporaryDirectory(prefix="verlenv-doctor-") as tmp:
        src = Path(tmp) / "probe.cu"
        src.write_text("__global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }\n")
        cmd = [str(nvcc), "-c", str(src), "-o", str(Path(tmp) / "probe.o")] + (["-ccbin", ccbin] if ccbin else [])
        p = _run(cmd, timeout=300, env={**os.environ, **environ})
    if p is None:
        return problem(name, f"{nvcc} could not be run (or took over 300 s)", "F4")
    if p.returncode == 0:
        return ok(name, f"nvcc compiles a kernel with {host}", host=host, nvcc=str(nvcc))
    from verlenv.doctor.logs import diagnose_text
    output = p.stderr + p.stdout
    first = next((line.strip() for line in output.splitlines() if "error" in line.lower()), output.strip()[:200])
    known = diagnose_text(output)
    failure_id = known[0].id if known else "F4"
    return problem(name, f"nvcc cannot compile a trivial kernel with {host}: {first}", failure_id, host=host,
                   nvcc=str(nvcc))



def probe_apex(facts: EnvFacts) -> ProbeResult:
    name = "apex"
    dist = facts.dist("apex")
    if dist is None:
        return skipped(name, "apex is not installed (only the megatron variant needs it)")
    root = Path(dist.location)
    init = root / "apex" / "__init__.py"
    init_text = init.read_text(errors="replace") if init.is_file() else ""
    # RECORD names the extensions of a wheel install; an install without RECORD still has them beside apex/.
    files = {Path(f).name for f in dist.files} | {p.name for p in root.glob("*.so")}
    if re.search(r"^\s*(?:from|import)\s+pyramid\b", init_text, re.MULTILINE) or any(
        canonicalize_name(Requirement(r).name) in ("pyramid", "cryptacular") for r in _requirements(dist.requires)
    ):
        return problem(name, f"apex {dist.version} at {root} is the PyPI Pyramid toolkit, not NVIDIA apex", "F6a",
                       version=dist.version, init=str(init))
    extensions = sorted({f.split(".")[0] for f in files if f.endswith(".so")})
    if not {"amp_C", "fused_layer_norm_cuda"} & set(extensions):
        return problem(name, f"NVIDIA apex {dist.version} has no CUDA extensions (no amp_C / fused_layer_norm_cuda)",
                       "F6b", version=dist.version, extensions=extensions)
    return ok(name, f"NVIDIA apex {dist.version} with {len(extensions)} compiled extensions", extensions=extensions)


def _requirements(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        try:
            Requirement(line)
            out.append(line)
        except InvalidRequirement:
            pass
    return out



def linking_objects(site_packages: list[str], skip: list[str], links) -> list[Path]:
    """Shared objects under site-packages, outside the `skip` folders, whose DT_NEEDED names satisfy `links`."""
    found = []
    skip = {os.path.realpath(s) for s in skip}
    for sp in site_packages:
        # os.walk never enters a linked folder: below the real site-packages, a folder's real path is its own.
        sp = os.path.normpath(sp)
        real = os.path.realpath(sp)
        for dirpath, dirnames, filenames in os.walk(sp):
            if real + dirpath[len(sp):] in skip:
                dirnames.clear()
                continue
            for fn in filenames:
                if (fn.endswith(".so") or ".so." in fn) and links(symbols.needed(Path(dirpath) / fn)):
                    found.append(Path(dirpath) / fn)
    return sorted(set(found))


def torch_extensions(site_packages: list[str], torch_root: str) -> list[Path]:
    """Shared objects outside torch that link torch's libraries: the compiled torch extensions."""
    return linking_objects(site_packages, [torch_root],
                           lambda needed: any(n.split(".so")[0] + ".so" in symbols.TORCH_LIBS for n in needed))


def probe_torch_extensions(facts: EnvFacts) -> ProbeResult:
    name = "torch-extensions"
    if not facts.torch:
        return skipped(name, "torch is not installed in this environment")
    lib = Path(facts.torch["lib"])
    providers = sorted(p for p in lib.glob("*.so*") if p.is_file())
    if not providers:
        return skipped(name, f"no torch libraries under {lib}")
    extensions = torch_extensions(facts.site_packages, facts.torch["root"])
    # Packages such as torch_c_dlpack_ext ship one build per torch release (…_torch27-cuda.so) and load the
    # one that matches: the others are meant to miss symbols.
    release = _version((facts.torch.get("version") or "").split("+")[0])
    mine = f"torch{release.major}{release.minor}" if release else None
    variants = [e for e in extensions if (m := RELEASE_TAG.search(e.name)) and m.group(0) != mine]
    extensions = [e for e in extensions if e not in variants]
    if not extensions:
        return ok(name, "no compiled torch extensions installed", providers=len(providers))
    broken = {}
    for ext in extensions:
        missing = symbols.unresolved(ext, providers, only=symbols.TORCH_ABI_SYMBOL)
        if missing:
            broken[str(ext)] = missing
    if not broken:
        return ok(name, f"{len(extensions)} torch extensions resolve every torch symbol"
                  + (f" ({len(variants)} builds for other torch releases not checked)" if variants else ""),
                  extensions=[str(e) for e in extensions], other_releases=[str(v) for v in variants])
    readable = symbols.demangle([s for names in broken.values() for s in names[:20]])
    lines, failure_id = [], "F1"
    for so, names in broken.items():
        # Show the symbol that says most: one whose std::string ABI tells how the extension was built.
        hints = {n: symbols.abi_hint(n, readable.get(n)) for n in names[:20]}
        first = next((n for n, h in hints.items() if "ABI" in h), names[0])
        lines.append(f"{so}: {len(names)} missing, e.g. {readable.get(first, first)} "
                     f"({hints.get(first) or symbols.abi_hint(first)})")
        if "vllm" in Path(so).parts and failure_id == "F1":
            failure_id = "F7"
        if "transformer_engine" in so:
            failure_id = "F8"
    return problem(name, f"{len(broken)} of {len(extensions)} torch extensions need symbols this torch "
                         f"({facts.torch.get('version')}) lacks:\n  "
                   + "\n  ".join(lines), failure_id, broken={k: v[:20] for k, v in broken.items()},
                   other_releases=[str(v) for v in variants])


def cuda_library_users(site_packages: list[str]) -> list[Path]:
    """Shared objects outside the nvidia-* wheels and torch that link a CUDA library from PyPI."""
    skip = [str(Path(sp) / d) for sp in site_packages for d in ("nvidia", "torch")]
    return linking_objects(site_packages, skip, lambda needed: any(symbols.CUDA_LIBRARY.match(n) for n in needed))


def probe_cuda_libraries(facts: EnvFacts) -> ProbeResult:
    name = "cuda-libraries"
    lib_dirs = [d for sp in facts.site_packages for d in symbols.cuda_library_dirs(Path(sp))]
    if not lib_dirs:
        return skipped(name, "no CUDA libraries from PyPI (torch/lib, nvidia/*/lib) in this environment")
    checked, broken = 0, {}
    for so in cuda_library_users(facts.site_packages):
        found, _, missing = symbols.cuda_library_gaps(so, lib_dirs)
        checked += bool(found)
        if missing:
            broken[str(so)] = {lib: names[:20] for lib, names in missing.items()}
    if not broken:
        return ok(name, f"{checked} objects find every versioned symbol they need in the env's CUDA libraries",
                  objects=checked)
    lines = []
    for so, missing in broken.items():
        lib, names = next(iter(sorted(missing.items())))
        lines.append(f"{so}: {names[0]}, version {lib} (and {sum(map(len, missing.values())) - 1} more)")
    return problem(name, f"{len(broken)} of {checked} objects need CUDA library symbols this env's libraries lack "
                   "(built against a newer CUDA minor than torch pins):\n  " + "\n  ".join(lines), "F8",
                   broken=broken)


def read_lock(path: Path) -> dict[str, str]:
    """name -> version pins of a `uv pip compile` lock (`name==version \\` lines, hashes ignored)."""
    text = read_text(Path(path), "--lock")
    pins = {}
    for line in text.splitlines():
        if m := LOCK_LINE.match(line.strip()):
            pins[canonicalize_name(m.group(1))] = m.group(2)
    if not pins:
        raise UserError(f"--lock {path}: no `name==version` lines; expected a uv pip compile lock")
    return pins


def probe_lock_drift(facts: EnvFacts, lock: Path | None, reason: str = "") -> ProbeResult:
    name = "lock-drift"
    if lock is None:
        return skipped(name, reason or "no lock given (--lock PATH, or --stack S --variant V with locks/ present)")
    pins = read_lock(lock)
    installed = {canonicalize_name(d.name): d.version for d in facts.distributions}
    drift, missing = {}, []
    for pkg, want in sorted(pins.items()):
        if not KEY_PACKAGES.match(pkg):
            continue
        have = installed.get(pkg)
        if have is None:
            missing.append(pkg)
        elif _version(have) != _version(want):
            drift[pkg] = f"{have} (lock: {want})"
    checked = sorted(p for p in pins if KEY_PACKAGES.match(p))
    if not drift and not missing:
        return ok(name, f"{len(checked)} key packages match {lock}", checked=checked)
    failure_id = "F7" if any(p in drift for p in ("torch", "vllm", "triton", "torchvision", "torchaudio")) else (
        "F8" if any(p.startswith("nvidia-cudnn") for p in drift) else "F17" if drift else "F7")
    parts = [f"{p} {v}" for p, v in drift.items()] + [f"{p} not installed" for p in missing]
    return problem(name, f"differs from {lock}: " + "; ".join(parts), failure_id,
                   [f"pip install --no-deps -r {lock}", "then rebuild the source builds: verlenv build"],
                   drift=drift, missing=missing)



def _cached_libcuda(ldconfig_text: str) -> list[Path]:
    return [Path(m.group(1)) for m in re.finditer(r"^\s*libcuda\.so\.1\s.*=>\s*(\S+)", ldconfig_text, re.MULTILINE)]


def _is_stub(path: Path) -> bool:
    # The toolkit's stub satisfies the linker but fails at run time; symlinks to it count as the stub.
    return "stubs" in path.parts or "stubs" in Path(os.path.realpath(path)).parts


def loaded_libcuda(environ: dict, ldconfig_text: str) -> Path | None:
    """The libcuda.so.1 the dynamic loader picks: LD_LIBRARY_PATH first, then the ld.so cache."""
    for d in filter(None, environ.get("LD_LIBRARY_PATH", "").split(":")):
        if (Path(d) / "libcuda.so.1").exists():
            return Path(d) / "libcuda.so.1"
    cached = _cached_libcuda(ldconfig_text)
    return cached[0] if cached else None


def triton_link_dirs(environ: dict, ldconfig_text: str, search_dirs: list[str]) -> list[Path]:
    """Where `-lcuda` is looked up when Triton builds its launcher: the directories Triton passes with -L
    (TRITON_LIBCUDA_PATH, else those of libcuda.so.1 in `ldconfig -p`, else in LD_LIBRARY_PATH), then the
    linker's own search path."""
    if tpath := environ.get("TRITON_LIBCUDA_PATH"):
        dirs = [Path(d) for d in tpath.split(":") if d]
    else:
        dirs = [p.parent for p in _cached_libcuda(ldconfig_text)] or [
            Path(d) for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d and (Path(d) / "libcuda.so.1").exists()]
    return dirs + [Path(d) for d in environ.get("LIBRARY_PATH", "").split(":") if d] + [Path(d) for d in search_dirs]


def linker_search_dirs() -> list[str]:
    p = _run(["cc", "-print-search-dirs"]) or _run(["gcc", "-print-search-dirs"])
    m = re.search(r"^libraries: =(.*)$", p.stdout, re.MULTILINE) if p else None
    return [os.path.normpath(d) for d in m.group(1).split(":")] if m else []


def probe_triton_libcuda(environ: dict, ldconfig_text: str, driver_present: bool,
                         search_dirs: list[str] | None = None) -> ProbeResult:
    name = "triton-libcuda"
    if not driver_present:
        return skipped(name, "no NVIDIA driver on this machine; on GPU hosts Triton needs the driver's libcuda.so.1")
    loaded = loaded_libcuda(environ, ldconfig_text)
    if loaded is None:
        return problem(name, "no libcuda.so.1 in LD_LIBRARY_PATH or `ldconfig -p`: the driver library is not visible",
                       "S6")
    if _is_stub(loaded):
        return problem(name, f"the loader picks the stub {loaded} (-> {os.path.realpath(loaded)}): CUDA calls fail "
                             "with CUDA_ERROR_STUB_LIBRARY", "S6", loaded=str(loaded))
    dirs = triton_link_dirs(environ, ldconfig_text, linker_search_dirs() if search_dirs is None else search_dirs)
    link = next((d / "libcuda.so" for d in dirs if (d / "libcuda.so").exists()), None)
    if link is None:
        return problem(name, f"driver library {loaded}, but no unversioned libcuda.so where Triton links (-L "
                             f"{', '.join(str(d) for d in dirs[:3])}...): `cannot find -lcuda`", "F10",
                       [f"export TRITON_LIBCUDA_PATH={loaded.parent}  (and ln -s libcuda.so.1 libcuda.so there if it "
                        "lacks one)",
                        "or sudo ldconfig after installing the driver's libcuda.so link"], loaded=str(loaded))
    return ok(name, f"runtime loads {loaded}; Triton links {link}", loaded=str(loaded), link=str(link))



def probe_threads(nproc_soft: int, cores: int, environ: dict) -> ProbeResult:
    name = "threads"
    unlimited = nproc_soft == resource.RLIM_INFINITY or nproc_soft < 0
    issues = []
    if not unlimited and nproc_soft < MIN_NPROC:
        issues.append(f"ulimit -u is {nproc_soft} (< {MIN_NPROC})")
    if cores >= MANY_CORES and not environ.get("OMP_NUM_THREADS"):
        issues.append(f"OMP_NUM_THREADS is unset on {cores} cores (every worker starts {cores} OpenMP threads)")
    limit = "unlimited" if unlimited else str(nproc_soft)
    if issues:
        return problem(name, "; ".join(issues), "S3", nproc=limit, cores=cores)
    return ok(name, f"ulimit -u {limit}, {cores} cores, OMP_NUM_THREADS={environ.get('OMP_NUM_THREADS', 'unset')}",
              nproc=limit, cores=cores)



def numpy_conflicts(facts: EnvFacts) -> list[str]:
    """Installed packages whose (marker-active) numpy requirement the installed numpy does not satisfy."""
    numpy = facts.dist("numpy")
    if numpy is None:
        return []
    have = Version(numpy.version)
    env = {**facts.markers, "extra": ""}
    out = []
    for d in facts.distributions:
        for line in d.requires:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if canonicalize_name(req.name) != "numpy" or (req.marker and not req.marker.evaluate(env)):
                continue
            if not req.specifier.contains(have, prereleases=True):
                out.append(f"{d.name} {d.version} requires numpy{req.specifier}")
    return sorted(set(out))


def probe_numpy(facts: EnvFacts) -> ProbeResult:
    name = "numpy"
    numpy = facts.dist("numpy")
    if numpy is None:
        return skipped(name, "numpy is not installed")
    conflicts = numpy_conflicts(facts)
    if conflicts:
        return problem(name, f"numpy {numpy.version} is installed but " + "; ".join(conflicts), "F11",
                       conflicts=conflicts)
    return ok(name, f"numpy {numpy.version} satisfies every installed package")



def cuda_majors(facts: EnvFacts) -> dict[str, list[str]]:
    """CUDA major -> evidence (dist names, libcudart copies) of the runtime libraries in the env."""
    found: dict[str, list[str]] = {}
    for d in facts.distributions:
        if m := re.match(r"^nvidia-[\w-]+-cu(\d+)$", d.name.lower()):
            found.setdefault(m.group(1), []).append(f"{d.name} {d.version}")
    for sp in facts.site_packages:
        nvidia = Path(sp) / "nvidia"
        if not nvidia.is_dir():
            continue
        if (nvidia / "cu13").is_dir():
            found.setdefault("13", []).append(str(nvidia / "cu13"))
        for lib in nvidia.glob("**/libcudart.so.*"):
            if m := re.match(r"libcudart\.so\.(\d+)", lib.name):
                found.setdefault(m.group(1), []).append(str(lib))
    return {k: sorted(set(v)) for k, v in sorted(found.items())}


def probe_cuda_majors(facts: EnvFacts) -> ProbeResult:
    name = "cuda-majors"
    majors = cuda_majors(facts)
    if not majors:
        return skipped(name, "no NVIDIA CUDA runtime wheels in this environment")
    if len(majors) == 1:
        (major, evidence), = majors.items()
        return ok(name, f"one CUDA major ({major}) in the env", evidence=evidence)
    summary = "; ".join(f"CUDA {m}: {', '.join(e[:3])}{' ...' if len(e) > 3 else ''}" for m, e in majors.items())
    return problem(name, f"CUDA runtime libraries of {len(majors)} majors in one env: {summary}", "F15", majors=majors)



def probe_pip(facts: EnvFacts, environ: dict) -> ProbeResult:
    name = "pip"
    pip = shutil.which("pip", path=environ.get("PATH"))
    if pip is None:
        return skipped(name, "no `pip` on PATH")
    try:
        p = subprocess.run([pip, "--version"], capture_output=True, text=True, timeout=60, check=False, env=environ)
    except FileNotFoundError:
        return warning(name, f"{pip} cannot start: its interpreter is gone (bad interpreter)", "S4", pip=pip)
    except (PermissionError, subprocess.TimeoutExpired) as e:
        return skipped(name, f"cannot run {pip} --version ({e.__class__.__name__})")
    m = re.search(r" from (\S+) \(python ([\d.]+)\)", p.stdout)
    if p.returncode != 0 or not m:
        return skipped(name, f"{pip} --version gave no location "
                             f"({(p.stderr.strip().splitlines() or ['no output'])[-1]})")
    where = os.path.realpath(Path(m.group(1)).parent)
    mine = {os.path.realpath(sp) for sp in facts.site_packages}
    if where not in mine:
        # A hazard for the next install by hand, not a fault of the env (under nox, PATH holds nox's own venv).
        return warning(name, f"`pip` on PATH ({pip}, python {m.group(2)}) installs into {where}, not into this env "
                             f"({facts.prefix})",
                       "S4", [f"{facts.executable} -m pip install ...  (or uv pip install -p {facts.executable} ...)"],
                       pip=pip)
    return ok(name, f"`pip` on PATH installs into this env ({where})", pip=pip)



def select_lock(root: Path | None, stack: str | None, variant: str | None,
                lock: Path | None) -> tuple[Path | None, str]:
    if lock is not None:
        if not Path(lock).is_file():
            raise UserError(f"--lock {lock}: no such file")
        return Path(lock), ""
    if not (stack and variant):
        return None, "no lock given (--lock PATH or --stack S --variant V)"
    path = (root or Path.cwd()) / pins.LOCK_DIR / f"{stack}-{variant}.{pins.machine_platform()}.txt"
    if not path.is_file():
        return None, f"{path} does not exist yet (run `nox -s lock`)"
    return path, ""


PROBES = ("driver", "nvcc-vs-torch", "host-compiler", "apex", "torch-extensions", "cuda-libraries", "lock-drift",
          "triton-libcuda", "threads", "numpy", "cuda-majors", "pip", "glibc", "libstdcxx", "nccl-env", "memory",
          "ray-disk", "ray-instances", "megatron")


def run_all(facts: EnvFacts, stack_name: str | None = None, variant: str | None = None,
            lock: Path | None = None, environ: dict | None = None, only: list[str] | None = None) -> list[ProbeResult]:
    unknown = [n for n in only or [] if n not in PROBES]
    if unknown:
        raise UserError(f"unknown probe {', '.join(unknown)}; valid: {', '.join(PROBES)}")
    environ = dict(os.environ if environ is None else environ)
    try:
        cat = catalog_mod.load()
    except UserError:
        cat = None
    if stack_name and cat is None:
        raise UserError(f"--stack {stack_name}: no stacks.toml found (run inside a verlenv checkout or set "
                        "VERLENV_ROOT)")
    stack = cat.stack(stack_name) if cat else None
    if cat and variant:
        stack.variant(variant)
    lock_path, lock_reason = select_lock(cat.root if cat else None, stack_name, variant, lock)

    driver, gpus, source = read_driver(environ)
    torch = facts.torch or {}
    nvcc = find_nvcc(environ, facts.site_packages)

    def triton():
        ldconfig = _run(["ldconfig", "-p"]) or _run(["/sbin/ldconfig", "-p"])
        return probe_triton_libcuda(environ, ldconfig.stdout if ldconfig else "", driver is not None)

    def threads():
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return probe_threads(resource.getrlimit(resource.RLIMIT_NPROC)[0], cores, environ)

    run = {
        "driver": lambda: probe_driver(driver, gpus, source, stack, cat),
        "nvcc-vs-torch": lambda: probe_nvcc_vs_torch(torch.get("cuda"), nvcc, bool(facts.torch)),
        "host-compiler": lambda: probe_host_compiler(nvcc, environ),
        "apex": lambda: probe_apex(facts),
        "torch-extensions": lambda: probe_torch_extensions(facts),
        "cuda-libraries": lambda: probe_cuda_libraries(facts),
        "lock-drift": lambda: probe_lock_drift(facts, lock_path, lock_reason),
        "triton-libcuda": triton,
        "threads": threads,
        "numpy": lambda: probe_numpy(facts),
        "cuda-majors": lambda: probe_cuda_majors(facts),
        "pip": lambda: probe_pip(facts, environ),
        "glibc": lambda: node_probes.probe_glibc(facts),
        "libstdcxx": lambda: node_probes.probe_libstdcxx(facts),
        "nccl-env": lambda: node_probes.probe_nccl_env(environ, facts.site_packages),
        "memory": lambda: node_probes.probe_memory(read_text_or_empty("/proc/meminfo"), environ, cgroup_memory_limit()),
        "ray-disk": lambda: node_probes.probe_ray_disk(node_probes.ray_temp_dir(environ),
                                                       node_probes.disk_usage(node_probes.ray_temp_dir(environ)),
                                                       environ),
        "ray-instances": lambda: node_probes.probe_ray_instances(node_probes.ray_instances(), facts),
        "megatron": lambda: node_probes.probe_megatron(facts),
    }
    return [_guarded(name, run[name]) for name in PROBES if not only or name in only]


def _guarded(name: str, probe) -> ProbeResult:
    """One probe's result; a file that changed or vanished under it (a live env, a cache being written) skips that
    probe with the reason, and the others still run."""
    try:
        return probe()
    except OSError as e:
        return skipped(name, f"a file changed or vanished while probed ({e}); run it again")


def read_text_or_empty(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def cgroup_memory_limit() -> int | None:
    """The container's memory limit (cgroup v2 memory.max, v1 limit_in_bytes), None when there is none."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        text = read_text_or_empty(path).strip()
        if text.isdigit() and int(text) < 1 << 60:  # v1 writes a huge number for "no limit"
            return int(text)
    return None


def check_findings(diagnoses, facts: EnvFacts, environ: dict | None = None) -> dict[str, list[ProbeResult]]:
    """For each finding of a log, the probes its family names (`checks`) run against the env of `facts`, and the
    installed versions of the packages it names: whether the fix applies here, or is already in place."""
    wanted = sorted({c for d in diagnoses for c in d.failure.checks})
    results = {r.name: r for r in run_all(facts, environ=environ, only=wanted)} if wanted else {}
    out = {}
    for d in diagnoses:
        checked = [results[c] for c in d.failure.checks if c in results]
        if d.failure.packages:
            checked.append(packages_result(facts, d.failure.packages))
        if checked:
            out[d.id] = checked
    return out


def packages_result(facts: EnvFacts, names) -> ProbeResult:
    found = {n: (facts.dist(n).version if facts.dist(n) else None) for n in names}
    shown = ", ".join(f"{n} {v}" if v else f"{n} not installed" for n, v in found.items())
    return ok("packages", shown, installed={n: v for n, v in found.items()})


def format_checks(checks: dict[str, list[ProbeResult]], python: str) -> list[str]:
    """Lines after the findings: each finding's fix checked against the env."""
    if not checks:
        return []
    out = ["", f"checked against the env of {python}:"]
    for fid, results in checks.items():
        for r in results:
            out.append(f"  [{fid}] {r.status:7s} {r.name}: {r.summary}")
    return out


def format_probes(results: list[ProbeResult], python: str) -> str:
    marks = {"ok": "ok     ", "problem": "PROBLEM", "warning": "warning", "skipped": "skipped"}
    out = [f"environment of {python}:"]
    for r in results:
        tag = f" [{r.failure_id}]" if r.failure_id else ""
        out.append(f"  {marks[r.status]} {r.name}{tag}: {r.summary}")
        for step in r.fix:
            out.append(f"            fix: {step}")
    problems = sum(r.status == "problem" for r in results)
    warnings = sum(r.status == "warning" for r in results)
    tail = f"{problems} problem{'s' if problems != 1 else ''} found" if problems else "no problems found"
    out.append(tail + (f" ({warnings} warning{'s' if warnings != 1 else ''})" if warnings else ""))
    return "\n".join(out)
