"""Run a verification: the static checks and each kernel check script in its own process.

The fast proof (the default) runs the static checks beside the kernel checks, and verl's trainer from the start
beside the other scripts (which run one at a time, in the packages table's order: data/packages.toml); thorough
runs everything one after the other. Results are reported in the same order either way: static first, then the
scripts in that order."""

import contextlib
import functools
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.utils import canonicalize_name

from verlenv.catalog import backends, families, gpus, packages, stacks
from verlenv.doctor import facts as facts_mod
from verlenv.env import base_record
from verlenv.errors import UserError
from verlenv.verify import group_routing, jit_jobs, kernel_paths, static, trainer_slots
from verlenv.verify.options import VerifyOptions
from verlenv.verify.results import SKIPPED_BY_REQUEST, STATUSES, CheckResult
from verlenv.verify.static import Scope

KERNELS_DIR = Path(__file__).with_name("kernels")
LOG_TAIL = 60  # lines of a failed script's (or failed check's) output kept in the report
# Scripts are check_<what>.py, never <package>.py: a script named like a package shadows it on a child's path.
SCRIPT_PREFIX = "check_"
TRAINER_SCRIPT = "verl_trainer"
# The line _common.Report prints after each check: what a check printed before it is that check's output.
RESULT_LINE = re.compile(r"^(PASS|FAIL|SKIP|WARN) (\S+)")


@dataclass
class Settings:
    """A run's options and what was resolved from them (the env, its variant and lock, the GPU profile, the family
    rows, the kernel folder)."""
    python: str
    catalog: stacks.Catalog
    variant: stacks.Variant
    profile: gpus.GpuProfile | None
    gpus: list[gpus.Gpu]
    lock: Path | None
    options: VerifyOptions = field(default_factory=VerifyOptions)
    kernels_dir: Path = KERNELS_DIR
    # The model families verl's trainer check trains (data/families.toml rows, or shrunk config.json files).
    families: list[dict] = field(default_factory=list)
    # How many trainers run at once, decided once per run (the host's free memory changes while it runs).
    _slots: trainer_slots.Slots | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_options(cls, o: VerifyOptions, *, python: str, cat: stacks.Catalog, variant: stacks.Variant,
                     profile: gpus.GpuProfile | None, visible: list[gpus.Gpu], lock: Path | None,
                     families_rows: list[dict] | None = None, kernels_dir: Path | None = None) -> "Settings":
        """A run's settings from its options, with what was resolved from them."""
        return cls(python=python, catalog=cat, variant=variant, profile=profile, gpus=visible,
                   lock=None if o.no_lock else lock, options=o, kernels_dir=kernels_dir or KERNELS_DIR,
                   families=families_rows if families_rows is not None else family_rows(o))

    @property
    def no_lock(self) -> bool:
        return self.options.no_lock

    @property
    def skipped(self) -> frozenset[str]:
        return frozenset(canonicalize_name(n) for n in self.options.skip_package)

    @property
    def only(self) -> str | None:
        return canonicalize_name(self.options.only) if self.options.only else None

    @property
    def timeout(self) -> float:
        return self.options.timeout

    @property
    def forced(self) -> bool:
        return self.options.force

    # The production path (verl's and vLLM's defaults, one script at a time) instead of the fast proof; the
    # tensor-parallel sizes of verl's rollout and Megatron actor in the trainer check.
    @property
    def thorough(self) -> bool:
        return self.options.thorough

    @property
    def rollout_tp(self) -> int:
        return self.options.rollout_tp

    @property
    def actor_tp(self) -> int:
        return self.options.actor_tp

    @property
    def trainer_override(self) -> tuple[str, ...]:
        """The user's own Hydra overrides of verl's config (--trainer-override), applied after the check's."""
        return self.options.trainer_override

    @property
    def mode(self) -> str:
        return "thorough" if self.thorough else "fast"

    @property
    def stack(self) -> stacks.Stack:
        return self.variant.stack

    @property
    def required(self) -> frozenset[str]:
        return packages.table().required(self.variant.actor, self.variant.rollout)

    @property
    def scope(self) -> Scope:
        return Scope(self.required, self.skipped, self.only)

    def trainer(self) -> dict:
        """What verl's trainer check runs: the variant's actor and rollout rows, the env's overrides, the families
        and how many at once (the fast proof: as many as the GPU's and the host's memory hold)."""
        rows = backends.table()
        slots = self.slots()
        parallel = slots.trainers
        caches = packages.table().jit_caches
        jit = jit_jobs.for_host(caches, self.variant.rollout, parallel, self.host_gib)
        warm = kernel_paths.warm_rows(self.families, self.variant.rollout, families.table())
        # A warm compile runs before the trainers, alone.
        alone = jit_jobs.for_host(caches, self.variant.rollout, 1, self.host_gib)
        return {"actor": rows.actor(self.variant.actor).row(), "rollout": rows.rollout(self.variant.rollout).row(),
                "overrides": dict(self.variant.trainer_overrides), "families": self.trained_families(rows),
                # The user's own (--trainer-override), after all of the check's.
                "user_overrides": list(self.trainer_override),
                "parallel": parallel,
                # MAX_JOBS for the trainers' run-time JIT compiles (their environment's own MAX_JOBS wins).
                "jit_max_jobs": jit.max_jobs if jit else None, "jit_why": jit.why if jit else None,
                # The kernels the rollout engine would compile at the first step, compiled once before the trainers.
                "jit_warm": warm, "jit_warm_max_jobs": alone.max_jobs if alone else None,
                # The fallback lines and attention backends the check reads its run's output with (_kernel_paths.py).
                "kernel_paths": kernel_paths.table()}

    def slots(self) -> trainer_slots.Slots:
        """How many trainers run at once, and which bound set it: decided at its first call."""
        if self._slots is None:
            memory = min((g.memory_mib for g in self.gpus if g.memory_mib), default=0) / 1024
            self._slots = trainer_slots.trainers_at_once(len(self.families), memory, self.host_gib,
                                                         self.thorough)
        return self._slots

    @functools.cached_property
    def host_gib(self) -> float | None:
        """This host's available memory (GiB), read once per run, so the trainers' slots and the JIT compiles' jobs
        are decided from one figure; None where the host cannot say."""
        return jit_jobs.host_available_gib()

    def trained_families(self, rows: backends.Table) -> list[dict]:
        """The family rows with `actor_needs`: the actor's compiled modules each family's trainer imports, decided
        here from every override it is given, so the check imports them and parses no overrides."""
        v = self.variant
        return [{**family, "actor_needs": rows.actor(v.actor).trainer_needs(rows.override_order(
                    v.actor, v.rollout, v.trainer_overrides, family.get("overrides") or [], self.thorough,
                    self.trainer_override))}
                for family in self.families]


def family_rows(o: VerifyOptions) -> list[dict]:
    """The families a run trains, as rows: --family (or the defaults of the mode), and each --model-config shrunk;
    the table's defaults only when neither was given."""
    table = families.table()
    kernel_paths.check_rows(table)  # each row's needs and attention kind name rows of their tables
    chosen = table.select(list(o.family), o.thorough) if o.family or not o.model_config else []
    shrunk = [families.shrink(Path(path), table) for path in o.model_config]
    sources = [str(Path(f.source).resolve()) for f in shrunk]
    if len(set(sources)) != len(sources):
        raise UserError(f"--model-config: {sorted(x for x in sources if sources.count(x) > 1)[0]} given twice; "
                        "each config is trained once")
    for depth in range(2, 8):  # two checkpoints in folders of one name (.../actor/huggingface): the folders above
        if len({f.name for f in shrunk}) == len(shrunk):
            break
        shrunk = [replace(f, name=families.label(Path(f.source), depth)) for f in shrunk]
    names = [f.name for f in chosen + shrunk]
    if len(set(names)) != len(names):
        raise UserError("--family/--model-config: two families named "
                        f"{sorted(n for n in names if names.count(n) > 1)[0]}; each family is trained once")
    return table.rows(chosen + shrunk)


@dataclass
class Run:
    settings: Settings
    facts: facts_mod.EnvFacts
    driver: str | None
    results: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return 1 if any(r.blocking for r in self.results) else 0


def script_key(script: Path) -> str:
    return Path(script).stem.removeprefix(SCRIPT_PREFIX)


def package_of(script: Path) -> str:
    return packages.table().script(script_key(script)).package


def label_of(script: Path) -> str:
    """What a script's own results (skipped, crashed) are named after: flash-attn, verl/verl_trainer."""
    package, key = package_of(script), script_key(script)
    return package if canonicalize_name(key) == package else f"{package}/{key}"


def timeout_for(script: Path, timeout: float, rounds: int = 1) -> float:
    """A script's time limit: --timeout, or its row's floor, once per round (verl's trainer runs its families in
    rounds of trainers side by side)."""
    return max(timeout, packages.table().script(script_key(script)).timeout_s * max(1, rounds))


def scripts(kernels_dir: Path) -> list[Path]:
    """Kernel check scripts (check_*.py; `_` files are their helpers), in the packages table's order (each
    package's checks in their order; a script no package names last)."""
    table = packages.table()
    rank = {key: i for i, key in enumerate(key for p in table.packages.values() for key in p.checks)}
    found = [p for p in Path(kernels_dir).glob(f"{SCRIPT_PREFIX}*.py")]
    return sorted(found, key=lambda p: (rank.get(script_key(p), len(rank)), p.name))


def known_packages(kernels_dir: Path) -> list[str]:
    return sorted(set(packages.table().packages) | {package_of(s) for s in scripts(kernels_dir)})


def _quiet(_line: str) -> None:
    pass


def verify(settings: Settings, progress: Callable[[str], None] = _quiet) -> Run:
    start = time.monotonic()

    def static_checks():
        facts = facts_mod.gather(settings.python)
        results, driver = run_static(settings, facts)
        progress(f"static checks: {len(results)} in {time.monotonic() - start:.1f} s")
        return facts, results, driver

    if settings.thorough:
        facts, results, driver = static_checks()
        results += run_kernels(settings, progress)
    else:  # the static checks read files and run the env's interpreter: CPU work beside the GPU's
        with ThreadPoolExecutor(max_workers=1) as pool:
            static = pool.submit(static_checks)
            kernels = run_kernels(settings, progress)
            facts, results, driver = static.result()
        results += kernels
    run = Run(settings, facts, driver, results)
    run.seconds = round(time.monotonic() - start, 2)
    return run


def installed_versions(facts: facts_mod.EnvFacts) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for d in facts.distributions:
        out.setdefault(canonicalize_name(d.name), []).append(d.version)
    return out


def run_static(s: Settings, facts: facts_mod.EnvFacts) -> tuple[list[CheckResult], str | None]:
    scope = s.scope
    installed = installed_versions(facts)
    whole_env = s.only is None
    results: list[CheckResult] = []
    if whole_env:
        results.append(static.check_python(facts.version, s.stack))
    # Without a GPU there is no target to compile flash-attn/apex/TE for: their absence is not a failure.
    unbuilt_ok = frozenset(b.name for b in s.variant.source_builds) if s.profile is None else frozenset()
    results += static.check_installed(installed, scope, s.variant.name, unbuilt_ok)
    # pip check is the slowest step (seconds on a big env) and mostly waits: run it beside the others.
    pool = ThreadPoolExecutor(max_workers=1)
    pip_check = pool.submit(static.check_pip, s.python, "pip" in installed,
                            overridden=static.overridden_names(s.variant)) if whole_env else None

    pins = _pins(s)
    if whole_env:
        results.append(_lock_result(s, installed, pins, facts.prefix))
        # A family this run trains whose fast kernels are missing would train on a slow path: say so, in words.
        provided = frozenset(pins) | frozenset(b.name for b in s.variant.source_builds)
        results += kernel_paths.check_family_kernels(s.families, installed, provided, unbuilt_ok, families.table())
    if scope.wants("verl"):  # the families verl's trainer trains: routing megatron-core scores otherwise, said first
        results += group_routing.check_group_routing(s.families, s.variant.actor, families.table())
    intact = packages.table().intact()
    protected = [n for n, pkg in intact.items() if scope.wants(pkg) and (n in installed or n in pins)]
    object_dists = [d for p in packages.table().packages.values() if scope.wants(p.name) for d, _ in p.objects]
    probe = static.probe_files(s.python, protected, object_dists)
    results += _protected_results(protected, probe, pins, scope)
    if whole_env and pins:
        results.append(static.check_locked_files(s.python, sorted(pins)))
    if pip_check is not None:
        results.append(pip_check.result())
    pool.shutdown()
    if scope.wants("apex"):
        results.append(static.check_apex(facts, scope))
    if scope.wants("megatron-core") and (api := static.check_megatron_api(facts, s.variant.megatron_api_gaps, scope)):
        results.append(api)
    targets = [s.profile.arch] if s.profile else list(s.stack.gpu_archs)
    results += static.check_objects(probe["objects"], installed, facts.torch, targets, s.profile is not None, scope)
    results += static.check_runtime_needs(s.python, installed, facts.torch, scope)
    driver_result, driver = static.check_driver(s.stack, s.catalog, dict(os.environ))
    if whole_env:
        results.append(driver_result)
        results.append(static.check_runtime_env(s.python, s.catalog.path, s.variant))
    if scope.wants("triton"):
        results.append(static.check_libcuda(dict(os.environ), static.ldconfig_text(), driver, scope))
    return results, driver


def _protected_results(protected: list[str], probe: dict, pins: dict, scope: Scope) -> list[CheckResult]:
    intact = packages.table().intact()
    return [static.check_protected(name, intact[name], probe["intact"].get(name),
                                   pins[name].version if name in pins else None, scope) for name in protected]


def lock_drift(python: str, cat: stacks.Catalog, variant: stacks.Variant, lock: Path) -> list[CheckResult]:
    """The checks `verlenv install` runs after installing: the env equals the lock; torch, cuDNN, NCCL intact."""
    s = Settings(python=python, catalog=cat, variant=variant, profile=None, gpus=[], lock=lock)
    facts = facts_mod.gather(python)
    installed = installed_versions(facts)
    pins = _pins(s)
    protected = [n for n in packages.table().intact() if n in installed or n in pins]
    probe = static.probe_files(python, protected, [])
    return [_lock_result(s, installed, pins, facts.prefix), *_protected_results(protected, probe, pins, s.scope)]


def _pins(s: Settings) -> dict:
    if s.no_lock or s.lock is None or not s.lock.is_file():
        return {}
    from verlenv.catalog.pins import read_lock

    return read_lock(s.lock)


def _lock_result(s: Settings, installed: dict, pins: dict, prefix: str) -> CheckResult:
    if s.no_lock:
        return CheckResult("lock/match", "env", "static", "skip", "skipped by request (--no-lock)", True)
    if s.lock is None or not s.lock.is_file():
        return CheckResult("lock/match", "env", "static", "fail", f"no lock at {s.lock}: run `verlenv lock`", True)
    try:
        others = base_record.read(prefix)
    except ValueError as e:
        return CheckResult("lock/match", "env", "static", "fail", str(e), True)
    builds = {b.name: b.version for b in s.variant.source_builds}
    return static.check_lock(installed, pins, builds, str(s.lock), others)


def run_kernels(s: Settings, progress: Callable[[str], None] = _quiet) -> list[CheckResult]:
    """Every kernel script's results, in the table's order. The fast proof starts the laned scripts first, each in a
    thread of its own, and runs the others one at a time meanwhile; thorough runs all one at a time."""
    scope = s.scope
    found: dict[Path, list[CheckResult]] = {}
    runnable = []
    for script in scripts(s.kernels_dir):
        package = package_of(script)
        if not scope.wants(package):
            continue
        if package in s.skipped:
            found[script] = [CheckResult(f"{label_of(script)}/kernels", package, "kernel", "skip", SKIPPED_BY_REQUEST,
                                         package in scope.required)]
        elif s.profile is None or not s.gpus:
            why = "no GPU on this machine: kernel checks need one" if not s.gpus else "no GPU profile"
            found[script] = [CheckResult(f"{label_of(script)}/kernels", package, "kernel", "skip", why,
                                         package in scope.required)]
        else:
            found[script] = []
            runnable.append(script)
    keyed = {script_key(p): p for p in runnable}
    lanes = [] if s.thorough else [keyed[key] for key in packages.table().lanes() if key in keyed]
    with ThreadPoolExecutor(max_workers=max(1, len(lanes))) as pool:
        running = {}
        for script in lanes:
            running[script_key(script)] = pool.submit(_run_one, s, script, list(running), progress)
        for script in runnable:
            if script not in lanes:
                beside = [key for key, future in running.items() if not future.done()]
                found[script] = _run_one(s, script, beside, progress)
        for script in lanes:
            found[script] = running[script_key(script)].result()
    return [r for results in found.values() for r in results]


def script_profile(s: Settings, beside: list[str]) -> dict:
    """What a script receives as --profile: the GPU profile, the env's variant, the mode and sizes, and which
    scripts run beside it."""
    out = {**s.profile.for_checks(len(s.gpus)), "variant": s.variant.name, "thorough": s.thorough,
           "rollout_tp": s.rollout_tp, "actor_tp": s.actor_tp, "beside": beside,
           "jit_caches": packages.table().jit_caches}
    if s.families:
        out["trainer"] = s.trainer()
    return out


def family_rounds(s: Settings, trainer: dict) -> int:
    """How many groups of families the trainer check runs, one group at a time (`trainer` is s.trainer())."""
    return -(-len(s.families) // trainer["parallel"])


def trainer_rounds(s: Settings) -> int:
    """How many times over verl's trainer check may take its time limit: one round per group of families run at
    once."""
    if not s.families:
        return 1
    trainer = s.trainer()
    floor = packages.table().script(TRAINER_SCRIPT).timeout_s
    warm = sum(-(-row["timeout_s"] // floor) for row in trainer["jit_warm"].values())
    return family_rounds(s, trainer) + warm


def trainer_plan(s: Settings) -> str | None:
    """The line printed as verl's trainer check starts: it says nothing more until it ends, which for `--family all`
    on one GPU is many minutes (visit U: a 708 s compile, then 5 of 12 trainers at once); None without families."""
    if not s.families:
        return None
    trainer = s.trainer()
    n, at_once, rounds = len(s.families), trainer["parallel"], family_rounds(s, trainer)
    line = (f"verl's trainer: {n} {'family' if n == 1 else 'families'}, {at_once} at once, "
            f"{rounds} {'round' if rounds == 1 else 'rounds'}")
    for key, row in trainer["jit_warm"].items():
        if s.profile is not None and s.profile.arch not in row["archs"]:
            continue  # the check compiles only the rows of its GPU
        line += f"; before them, {key} compiled once (up to {row['timeout_s']} s"
        line += f", none where {row['prebuilt_by']} is installed)" if row.get("prebuilt_by") else ")"
    return line


def _run_one(s: Settings, script: Path, beside: list[str], progress) -> list[CheckResult]:
    start = time.monotonic()
    rounds = trainer_rounds(s) if script_key(script) == TRAINER_SCRIPT else 1
    if script_key(script) == TRAINER_SCRIPT and (plan := trainer_plan(s)):
        progress(plan)
    results = run_script(s.python, script, script_profile(s, beside), timeout_for(script, s.timeout, rounds), s.scope)
    failed = sum(r.status == "fail" for r in results)
    alongside = f" (beside {', '.join(beside)})" if beside else ""
    progress(f"kernel checks: {script.name}: {len(results)} results, {failed} failed, "
             f"{time.monotonic() - start:.1f} s{alongside}")
    return results


def run_script(python: str, script: Path, profile: dict, timeout: float, scope: Scope) -> list[CheckResult]:
    """One kernel check script in its own process: its results, or one failure saying why there are none."""
    package = package_of(script)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="verlenv-verify-") as tmp:
        out_path = Path(tmp) / "results.json"
        # Scripts run in a scratch folder: a relative interpreter path must not change meaning there.
        interpreter = os.path.abspath(python) if os.sep in python else python
        cmd = [interpreter, str(Path(script).resolve()), "--out", str(out_path), "--profile", json.dumps(profile)]
        # Unbuffered, so each check's output lands before its result line (check_outputs splits on those).
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                cwd=tmp, start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        timed_out = False
        try:
            log, _ = proc.communicate(timeout=timeout)
        except BaseException as e:  # a stop (Ctrl-C, a cancelled node task) takes the script's group with it
            if not isinstance(e, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                raise
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)  # the script's own group: its workers go with it
            try:
                log, _ = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:  # a worker left the group and holds the pipe open
                log = ""
        entries = _read_entries(out_path)
    seconds = round(time.monotonic() - start, 2)
    results = [_result(e, package, scope) for e in entries]
    _attach_logs(results, log)
    tail = "\n".join(log.splitlines()[-LOG_TAIL:])
    if timed_out:
        why = f"{script.name} timed out after {timeout:.0f} s"
    elif proc.returncode != 0:
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
        last = next((line for line in reversed(log.splitlines()) if line.strip()), "no output")
        why = f"{script.name} crashed ({how}): {last.strip()[:300]}"
    elif not results:
        why = f"{script.name} wrote no results to --out (a list of {{check, package, status}} objects)"
    else:
        return results
    results.append(CheckResult(f"{label_of(script)}/run", package, "kernel", "fail", why, package in scope.required,
                               {"returncode": proc.returncode, "results_before": len(results)}, seconds,
                               log=tail, diagnosis=static.diagnose(log)))
    return results


def check_outputs(log: str) -> dict[str, str]:
    """Each check's own output (its child processes' included): the lines printed since the previous check's
    result line, up to its own."""
    outputs, lines = {}, []
    for line in log.splitlines():
        match = RESULT_LINE.match(line)
        if match:
            outputs[match.group(2)] = "\n".join(lines)
            lines = []
        else:
            lines.append(line)
    return outputs


def _attach_logs(results: list[CheckResult], log: str) -> None:
    """A failed check keeps the tail of its output and what the doctor recognises in it."""
    outputs = check_outputs(log)
    for r in results:
        own = outputs.get(r.name, "")
        if r.status == "fail" and own.strip():
            r.log = "\n".join(own.splitlines()[-LOG_TAIL:])
            r.diagnosis = static.diagnose(own)


def _read_entries(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(data, list):
        return []
    return [e for e in data if isinstance(e, dict) and isinstance(e.get("check"), str)
            and e.get("status") in STATUSES]


def _result(entry: dict, default_package: str, scope: Scope) -> CheckResult:
    package = canonicalize_name(entry.get("package") or default_package)
    numbers = entry.get("numbers") if isinstance(entry.get("numbers"), dict) else {}
    seconds = entry.get("seconds") if isinstance(entry.get("seconds"), (int, float)) else 0.0
    if package in scope.skipped:
        return CheckResult(entry["check"], package, "kernel", "skip", SKIPPED_BY_REQUEST, package in scope.required)
    known = entry.get("known_issue") if isinstance(entry.get("known_issue"), dict) else None
    if known and entry["status"] == "fail" and isinstance(known.get("url"), str):
        # A failure of the upstream code the env carries (the check matched its signature): reported with the link,
        # not against the env.
        reason = (f"known upstream failure {known['url']} (fix: {known.get('fix', 'none yet')}): "
                  f"{entry.get('reason', '')}")
        return CheckResult(entry["check"], package, "kernel", "fail", reason, False, numbers, float(seconds))
    return CheckResult(entry["check"], package, "kernel", entry["status"], str(entry.get("reason", "")),
                       package in scope.required, numbers, float(seconds))
