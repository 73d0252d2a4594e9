"""verlenv's sessions: thin wrappers over the `verlenv` command. `nox -l` lists them.

On a node that reaches no index, run them with the nox a bundle carries (`BUNDLE/.tool/bin/nox -s verify-h100`,
made by the bundle's bootstrap): it sets VERLENV_BUNDLE, and the sessions then make no venv and install
nothing; `verlenv` is the bundle's own, and the build sessions build from the sources (and CUDA_HOME) the bundle
carries (README: Air-gapped cluster).
"""

import os
import sys
import tomllib
from pathlib import Path

import nox

BUNDLE = os.environ.get("VERLENV_BUNDLE")
nox.options.default_venv_backend = "none" if BUNDLE else "uv"
nox.options.sessions = ["tests"]
nox.options.error_on_external_run = True

PYPROJECT = nox.project.load_toml("pyproject.toml")
TOOL_PYTHON = "3.11"


def _tool(session: nox.Session) -> None:
    """Install verlenv itself into the session's venv (the tool, not the stack's env); from a bundle, nothing."""
    if not BUNDLE:
        session.install("-e", ".")


def _run(session: nox.Session, *args: str) -> None:
    # verify's report records that nox started it.
    session.run("verlenv", *args, env={"VERLENV_LAUNCHER": "nox"})


def _verlenv(session: nox.Session, *args: str) -> None:
    _tool(session)
    _run(session, *args, *session.posargs)


def _env_args(posargs: list[str]) -> list[str]:
    """The --stack/--variant among a session's arguments: the install and build before a verify need the same."""
    out = []
    for i, arg in enumerate(posargs):
        name, eq, value = arg.partition("=")
        if name in ("--stack", "--variant"):
            out += [name, value] if eq else [name, *posargs[i + 1:i + 2]]
    return out


@nox.session(python=TOOL_PYTHON)
def tests(session: nox.Session) -> None:
    """Run the test suite (GPU tests skip on machines without one)."""
    # One pytest-xdist worker per CPU (tests/conftest.py keeps a module's tests, and the modules that start Ray
    # clusters or use the GPU, on one worker): 1137 s of pytest on 2 idle cores, 2026-11-28. `-- -n 0` (or any -n,
    # or `-p no:xdist`) given after `--` replaces it: one process, in file order.
    chosen = any(a.startswith(("-n", "--numprocesses", "--dist")) or a.endswith("no:xdist") for a in session.posargs)
    args = [*([] if chosen else ["-n", "auto"]), *session.posargs]
    if BUNDLE:
        _bundle_tests(session, args)
        return
    _tool(session)
    session.install(*nox.project.dependency_groups(PYPROJECT, "test", "resolver"))
    session.run("pytest", *args)


def _bundle_tests(session: nox.Session, args: list[str]) -> None:
    """The suite on a node that reaches no index: pytest from the bundle's tools (`verlenv bundle --tests` carries
    them), this tree's verlenv; without a `-m` of the user's, only the tests that need no index (`not network`)."""
    site = Path(BUNDLE, ".tool", "site")
    if not (site / "pytest").is_dir():
        session.skip(f"{BUNDLE} carries no test tools: make the bundle with `verlenv bundle --tests` (or run the "
                     "tests where an index answers)")
    chosen = any(a == "-m" or a.startswith("-m") and len(a) > 2 for a in args)
    # Only the bundle's pytest plugins: the node's interpreter may have its own (a GPU host's python3, a torch venv,
    # loaded pytest-benchmark, -cov and -mock into visit I's run), each a change to how the suite runs.
    plugins = [arg for name, module in BUNDLE_PYTEST_PLUGINS.items() if f"no:{name}" not in args
               for arg in ("-p", module)]
    session.run(sys.executable, "-m", "pytest", *plugins, *([] if chosen else ["-m", "not network"]), *args,
                env={"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent / "src"), str(site)]),
                     "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})


# The test group's pytest plugins (pyproject.toml): entry-point name -> module, loaded by name from the bundle.
BUNDLE_PYTEST_PLUGINS = {"xdist": "xdist.plugin", "xdist.looponfail": "xdist.looponfail", "timeout": "pytest_timeout",
                         "hypothesispytest": "_hypothesis_pytestplugin"}


@nox.session(python=TOOL_PYTHON)
def lint(session: nox.Session) -> None:
    """Check the code with ruff (its rules and line length are pyproject.toml's)."""
    if BUNDLE:
        session.skip("ruff installs from PyPI; run it where an index answers")
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", "src", "tests", "benchmarks", "scripts", "noxfile.py", *session.posargs)


@nox.session(python=TOOL_PYTHON)
def lock(session: nox.Session) -> None:
    """Re-resolve the pip locks, re-render the env files, write conda-lock.yml (offline: against locks/conda-forge)."""
    _verlenv(session, "lock")


@nox.session(python=TOOL_PYTHON)
def env(session: nox.Session) -> None:
    """Install a locked variant (default stack, fsdp) into .venv-<stack>-<variant> and check drift."""
    _verlenv(session, "install")


@nox.session(python=TOOL_PYTHON)
def bundle(session: nox.Session) -> None:
    """Collect a locked variant's files into bundles/ for offline installs (`-- --split 56MiB`, `-- --dry-run`)."""
    _verlenv(session, "bundle")


@nox.session(python=TOOL_PYTHON)
def build(session: nox.Session) -> None:
    """Build every native package of the variant against its env's torch."""
    _verlenv(session, "build")


@nox.session(name="build-flash-attn", python=TOOL_PYTHON)
def build_flash_attn(session: nox.Session) -> None:
    """Build flash-attn against the env's torch."""
    _verlenv(session, "build", "flash-attn")


@nox.session(name="build-apex", python=TOOL_PYTHON)
def build_apex(session: nox.Session) -> None:
    """Build NVIDIA apex (Megatron variant) against the env's torch."""
    _verlenv(session, "build", "apex", "--variant", "megatron")


@nox.session(name="build-te", python=TOOL_PYTHON)
def build_te(session: nox.Session) -> None:
    """Build transformer-engine's torch extension (Megatron variant) against the env's torch."""
    _verlenv(session, "build", "transformer-engine-torch", "--variant", "megatron")


@nox.session(name="build-megatron-bridge", python=TOOL_PYTHON)
def build_megatron_bridge(session: nox.Session) -> None:
    """Build Megatron-Bridge, verl's default bridge (Megatron variant), from its git commit: -- --source CLONE."""
    _verlenv(session, "build", "megatron-bridge", "--variant", "megatron")


def _verify(session: nox.Session, gpu: str) -> None:
    """Verify the env against its lock and, on a GPU matching the profile, run the kernel checks."""
    _tool(session)
    # The session's venv is verlenv's own: verify skips it and picks .venv-<stack>-<variant>.
    _run(session, "verify", "--gpu", gpu, *session.posargs)


@nox.session(python=TOOL_PYTHON)
def verify(session: nox.Session) -> None:
    """Install the default env, build its native packages for the visible GPU, verify on what is here."""
    _tool(session)
    env = _env_args(session.posargs)
    if BUNDLE:  # offline: the env from the bundle, whose source-built wheels were built for the cluster's GPUs
        _run(session, "install", "--bundle", BUNDLE, *env)
    else:
        _run(session, "install", *env)
        _run(session, "build", "--gpu", "auto", "--if-gpu", *env)
    _run(session, "verify", "--gpu", "auto", *session.posargs)


# One verify-<gpu> session per GPU profile, the rows of src/verlenv/data/gpus.toml (its `defaults` is no profile).
GPUS_TOML = Path(__file__).parent / "src" / "verlenv" / "data" / "gpus.toml"
GPU_PROFILES = {key: row for key, row in tomllib.loads(GPUS_TOML.read_text()).items() if key != "defaults"}


def _verify_session(gpu: str, row: dict) -> None:
    def run(session: nox.Session) -> None:
        _verify(session, gpu)

    sm = row["arch"].replace(".", "")
    run.__doc__ = f"Verify against the {row['title']} profile (sm_{sm}); exit 2 on another GPU unless -- --force."
    nox.session(name=f"verify-{gpu}", python=TOOL_PYTHON)(run)


for _gpu, _row in GPU_PROFILES.items():
    _verify_session(_gpu, _row)


@nox.session(name="verify-cluster", python=TOOL_PYTHON)
def verify_cluster(session: nox.Session) -> None:
    """Verify every node of the running Ray cluster and compare them (`-- --ray HOST:PORT` for another address)."""
    _tool(session)
    _run(session, "verify", "--ray", "auto", *session.posargs)  # a later --ray in posargs wins


@nox.session(python=TOOL_PYTHON)
def doctor(session: nox.Session) -> None:
    """Diagnose the stack's env (no args: .venv-<stack>-<variant>, as verify picks it) or a log (`-- build.log`)."""
    # The session's venv is verlenv's own: doctor skips it as verify does (and its pip on PATH is only a warning).
    _verlenv(session, "doctor")
