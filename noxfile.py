"""verlenv's sessions: thin wrappers over the `verlenv` command. `nox -l` lists them."""

import nox

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["tests"]
nox.options.error_on_external_run = True

PYPROJECT = nox.project.load_toml("pyproject.toml")
TOOL_PYTHON = "3.11"


def _tool(session: nox.Session) -> None:
    """Install verlenv itself into the session's venv (the tool, not the stack's env)."""
    session.install("-e", ".")


def _verlenv(session: nox.Session, *args: str) -> None:
    _tool(session)
    session.run("verlenv", *args, *session.posargs)


@nox.session(python=TOOL_PYTHON)
def tests(session: nox.Session) -> None:
    """Run the test suite (GPU tests skip on machines without one)."""
    _tool(session)
    session.install(*nox.project.dependency_groups(PYPROJECT, "test"))
    session.run("pytest", *session.posargs)


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


def _verify(session: nox.Session, gpu: str) -> None:
    """Verify the env against its lock and, on a GPU matching the profile, run the kernel checks."""
    _tool(session)
    # The session's venv is verlenv's own: verify skips it and picks .venv-<stack>-<variant>.
    session.run("verlenv", "verify", "--gpu", gpu, *session.posargs)


@nox.session(python=TOOL_PYTHON)
def verify(session: nox.Session) -> None:
    """Install the default env, build its native packages for the visible GPU, verify on what is here."""
    _tool(session)
    session.run("verlenv", "install")
    session.run("verlenv", "build", "--gpu", "auto", "--if-gpu")
    session.run("verlenv", "verify", "--gpu", "auto", *session.posargs)


@nox.session(name="verify-a100", python=TOOL_PYTHON)
def verify_a100(session: nox.Session) -> None:
    """Verify against the A100 profile (sm_80); exit 2 on another GPU unless -- --force."""
    _verify(session, "a100")


@nox.session(name="verify-h100", python=TOOL_PYTHON)
def verify_h100(session: nox.Session) -> None:
    """Verify against the H100/H200 profile (sm_90); exit 2 on another GPU unless -- --force."""
    _verify(session, "h100")


@nox.session(name="verify-cluster", python=TOOL_PYTHON)
def verify_cluster(session: nox.Session) -> None:
    """Verify every node of the running Ray cluster and compare them (`-- --ray HOST:PORT` for another address)."""
    _tool(session)
    session.run("verlenv", "verify", "--ray", "auto", *session.posargs)  # a later --ray in posargs wins


@nox.session(python=TOOL_PYTHON)
def doctor(session: nox.Session) -> None:
    """Diagnose the env (no args) or a log file (`nox -s doctor -- build.log`)."""
    _verlenv(session, "doctor")
