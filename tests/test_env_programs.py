"""The programs verlenv runs inside an env's own python are files (src/verlenv/*/env_programs/), run by path: none is
left as a program string handed to `python -c`; each runs on the standard library plus what the env has (never
verlenv), is packaged, and answers with the JSON its caller parses. Programs that need torch run in the default
stack's env (torch_python()); the others in this interpreter, on distributions the test writes itself."""

import ast
import importlib
import json
import os
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

from test_kernel_scripts import torch_python

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "verlenv"
FOLDERS = sorted(PACKAGE.glob("*/env_programs"))
PROGRAMS = sorted(p for folder in FOLDERS for p in folder.glob("*.py") if p.name != "__init__.py")
# A `python -c` program longer than this, or of several lines, belongs in a file.
ONE_LINER = 80
# (caller module, its constant): the file each caller runs.
CALLERS = (("verlenv.doctor.facts", "SCRIPT"), ("verlenv.bundle.offline", "_VERSIONS"),
           ("verlenv.env.install", "_LOCAL_WHEELS"), ("verlenv.env.runtime_env", "PROBE"),
           ("verlenv.native.toolchain", "_TORCH_FILES_PROBE"), ("verlenv.native.toolchain", "_TORCH_PROBE"),
           ("verlenv.native.build", "_MISSING"), ("verlenv.native.build", "_IMPORT_MODULES"),
           ("verlenv.verify.static", "_WHEEL_FACTS"), ("verlenv.verify.static", "_RUNTIME_PROBE"),
           ("verlenv.cluster.fingerprint", "TORCH_SCRIPT"))


# --- no program strings -------------------------------------------------------------------------------------------

def _text(node: ast.AST, strings: dict[str, ast.AST]) -> str | None:
    """The string an expression spells, as far as its constant parts go (f-strings, +, a name bound to one)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in strings:
        return _text(strings[node.id], {k: v for k, v in strings.items() if k != node.id})
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(v, strings) or "" for v in node.values if isinstance(v, ast.Constant)) or "{}"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        parts = [_text(node.left, strings), _text(node.right, strings)]
        return "".join(p or "" for p in parts) if any(p is not None for p in parts) else None
    if isinstance(node, (ast.GeneratorExp, ast.ListComp)):  # one part shown: enough to tell its lines
        return _text(node.elt, strings)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join" \
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str):
        return node.func.value.value.join(_text(a, strings) or "" for a in node.args)
    return None


def _bound(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """name -> the expression last assigned to it, in these statements (not inside nested functions)."""
    out = {}
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                out[node.targets[0].id] = node.value
    return out


def program_strings(source: str, rel: str) -> list[str]:
    """Each `[..., "-c", PROGRAM, ...]` whose PROGRAM is a string of several lines or over ONE_LINER characters."""
    tree = ast.parse(source)
    module = _bound(tree.body)
    out = []
    scopes = [(tree, module)] + [(f, module | _bound(f.body)) for f in ast.walk(tree)
                                  if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    seen = set()
    for scope, strings in reversed(scopes):  # innermost binding first: a function's own names shadow the module's
        for node in ast.walk(scope):
            if not isinstance(node, ast.List) or id(node) in seen:
                continue
            seen.add(id(node))
            for flag, program in zip(node.elts, node.elts[1:]):
                if not (isinstance(flag, ast.Constant) and flag.value == "-c"):
                    continue
                text = _text(program, strings)
                if text is not None and ("\n" in text or len(text) > ONE_LINER):
                    out.append(f"{rel}:{node.lineno} runs a {len(text)}-character program with -c: make it a file "
                               "in env_programs/ and run it by path")
    return out


def test_no_program_is_handed_to_python_as_a_string():
    found = [hit for path in sorted(PACKAGE.rglob("*.py"))
             for hit in program_strings(path.read_text(), path.relative_to(PACKAGE).as_posix())]
    assert found == []


@pytest.mark.parametrize("source", [
    'P = r"""\nimport json, sys\nprint(json.dumps(sys.argv))\n"""\ndef f(python):\n    run([python, "-c", P])\n',
    'P = ("import json, os, sys, sysconfig; names = json.loads(sys.argv[1]); "\n'
    '     "print(json.dumps({n: os.environ.get(n) for n in names}))")\ndef f(py):\n    run([py, "-c", P, "[]"])\n',
    'def f(python, modules):\n    code = "import importlib, torch\\n" + "".join(f"importlib.import_module({m!r})\\n"'
    ' for m in modules)\n    run([python, "-c", code])\n',
])
def test_the_walk_finds_the_forms_the_programs_had(source):
    """The three shapes the ten programs and install_wheel's import check had: each is found."""
    assert len(program_strings(source, "x.py")) == 1


def test_the_walk_leaves_one_liners_and_other_tools_c_flags():
    source = ('def f(python, nvcc, src):\n    run([python, "-c", "import sys; print(sys.version_info[0])"])\n'
              '    run([nvcc, "-c", str(src), "-o", "probe.o"])\n')
    assert program_strings(source, "x.py") == []


# --- the files: stdlib only, packaged, where their callers look -----------------------------------------------------

def test_every_caller_runs_a_program_file_that_exists():
    for module, name in CALLERS:
        path = getattr(importlib.import_module(module), name)
        assert isinstance(path, Path) and path.is_file() and path in PROGRAMS, (module, name, path)
    assert len(PROGRAMS) == len(CALLERS)


def test_no_program_imports_verlenv_and_none_shadows_what_they_import():
    """The env may lack verlenv; and a program's own folder is first on its sys.path, so a file there named like a
    module (json.py, torch.py) would be imported in its place."""
    imported = set()
    for program in PROGRAMS:
        for node in ast.walk(ast.parse(program.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add((node.module or "").split(".")[0])
    assert "verlenv" not in imported
    assert {p.stem for p in PROGRAMS} & (imported | set(sys.stdlib_module_names) | {"torch"}) == set()


def test_the_program_folders_are_packages_the_wheel_carries():
    """pyproject.toml's packages.find takes folders with an __init__.py, and their .py files with them (as
    verify/kernels/); Ray's py_modules carries the whole verlenv folder to the nodes."""
    setuptools = pytest.importorskip("setuptools")
    found = set(setuptools.find_packages(where=str(ROOT / "src")))
    assert {f"verlenv.{folder.parent.name}.env_programs" for folder in FOLDERS} <= found
    assert len(FOLDERS) == 6


# --- each program's answer ----------------------------------------------------------------------------------------

def run(python: str, program: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    path = next(p for p in PROGRAMS if p.relative_to(PACKAGE).as_posix() == program)
    return subprocess.run([python, str(path), *args], capture_output=True, text=True, timeout=300,
                          env=None if env is None else {**os.environ, **env}, cwd="/")


def answer(python: str, program: str, *args: str, env: dict | None = None):
    proc = run(python, program, *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def site(tmp_path) -> dict:
    """A folder on PYTHONPATH holding two installed distributions as their dist-info folders say: `demo-ext` from a
    local wheel file with a CPython extension, `demo-pure` from an index, no extension, a WHEEL tag of one CPython."""
    demo_ext = tmp_path / "demo_ext-1.2.dist-info"
    demo_ext.mkdir()
    (demo_ext / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-ext\nVersion: 1.2\n")
    (demo_ext / "WHEEL").write_text("Wheel-Version: 1.0\nTag: cp311-cp311-linux_x86_64\n")
    (demo_ext / "RECORD").write_text("demo_ext/__init__.py,,\ndemo_ext/_C.cpython-311-x86_64-linux-gnu.so,,\n")
    (demo_ext / "direct_url.json").write_text(json.dumps({"url": "file:///wheels/demo_ext-1.2-cp311-linux.whl",
                                                          "archive_info": {}}))
    demo_pure = tmp_path / "demo_pure-0.3.dist-info"
    demo_pure.mkdir()
    (demo_pure / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-pure\nVersion: 0.3\n")
    (demo_pure / "WHEEL").write_text("Wheel-Version: 1.0\nTag: cp310-cp310-manylinux_2_28_x86_64\n")
    (demo_pure / "RECORD").write_text("demo_pure/__init__.py,,\ndemo_pure/lib/libdemo.so,,\n")
    return {"PYTHONPATH": str(tmp_path)}


def test_installed_versions(site):
    proc = run(sys.executable, "bundle/env_programs/installed_versions.py", "demo-pure", "demo-nope", env=site)
    assert proc.stdout == '{"demo-pure": "0.3", "demo-nope": null}\n'


def test_local_wheels(site):
    assert answer(sys.executable, "env/env_programs/local_wheels.py", "demo-ext", "demo-pure", "demo-nope",
                  env=site) == {"demo-ext": "file:///wheels/demo_ext-1.2-cp311-linux.whl"}


def test_missing_distributions(site):
    proc = run(sys.executable, "native/env_programs/missing_distributions.py", "demo-pure", "Demo_Ext", "demo-nope",
               env=site)
    assert proc.stdout == '["demo-nope"]\n'


def test_wheel_facts(site):
    assert answer(sys.executable, "verify/env_programs/wheel_facts.py", "demo-ext", "demo-pure", env=site) == {
        "demo-ext": {"tags": ["cp311-cp311-linux_x86_64"],
                     "extensions": ["demo_ext/_C.cpython-311-x86_64-linux-gnu.so"]},
        "demo-pure": {"tags": ["cp310-cp310-manylinux_2_28_x86_64"], "extensions": []}}


def test_variables_seen():
    got = answer(sys.executable, "env/env_programs/variables_seen.py", '["VERLENV_TEST_SEEN", "VERLENV_TEST_UNSET"]',
                 env={"VERLENV_TEST_SEEN": "a:b"})
    assert got == {"site": sysconfig.get_paths()["purelib"], "prefix": sys.prefix,
                   "seen": {"VERLENV_TEST_SEEN": "a:b", "VERLENV_TEST_UNSET": None}}


def test_runtime_probe():
    got = answer(sys.executable, "verify/env_programs/runtime_probe.py", '["libc.so.6", "libverlenv-nope.so.1"]',
                 env={"CUDA_HOME": "/opt/cuda-test", "CXX": "g++-test"})
    assert got["libs"]["libc.so.6"] is None
    assert "libverlenv-nope.so.1" in got["libs"]["libverlenv-nope.so.1"]
    assert got["env"] == {"CUDA_HOME": "/opt/cuda-test", "CUDA_PATH": os.environ.get("CUDA_PATH"), "CXX": "g++-test",
                          "NVCC_CCBIN": os.environ.get("NVCC_CCBIN"), "PATH": os.environ.get("PATH")}


def test_env_facts_in_this_interpreter():
    got = answer(sys.executable, "doctor/env_programs/env_facts.py")
    assert (got["executable"], got["prefix"]) == (sys.executable, sys.prefix)
    assert {d["name"]: d["version"] for d in got["distributions"]}["packaging"] == metadata.version("packaging")
    assert got["markers"]["python_full_version"] == ".".join(map(str, sys.version_info[:3]))


def test_torch_files_without_torch(tmp_path):
    """An interpreter with no torch answers with no root and no files (the caller then keeps nothing in its cache)."""
    got = answer(sys.executable, "native/env_programs/torch_files.py", env={"PYTHONPATH": str(tmp_path)})
    if got["torch_root"] is not None:
        pytest.skip("this interpreter has torch")
    assert got["files"] == {}


@pytest.fixture(scope="module")
def torch_py() -> str:
    python = torch_python()
    if python is None:
        pytest.skip("no env with torch: the default stack's env (.venv-verl-0.9-fsdp) or $VERLENV_TEST_TORCH_PYTHON")
    return python


@pytest.fixture(scope="module")
def torch_info(torch_py) -> dict:
    return answer(torch_py, "native/env_programs/torch_info.py")


def test_torch_info_and_torch_files_in_the_env(torch_py, torch_info):
    from verlenv.native.toolchain import TorchInfo

    info = TorchInfo(**torch_info)
    files = answer(torch_py, "native/env_programs/torch_files.py")
    root = Path(files["torch_root"])
    assert Path(info.torch_lib) == root / "lib" and root.parent == Path(info.purelib)
    assert info.python == torch_py and info.python_tag.startswith("cp3")
    s = os.stat(root / "__init__.py")
    assert files["files"]["__init__.py"] == [s.st_ino, s.st_size, s.st_mtime_ns]
    assert {"version.py", "lib/libtorch_cpu.so"} <= set(files["files"])


def test_torch_versions_and_env_facts_agree_in_the_env(torch_py, torch_info):
    versions = answer(torch_py, "cluster/env_programs/torch_versions.py")
    facts = answer(torch_py, "doctor/env_programs/env_facts.py")
    info = torch_info
    assert list(versions) == ["version", "cuda", "cudnn", "nccl", "cxx11_abi"]
    assert versions["version"] == info["torch"] and versions["cuda"] == info["cuda"] == facts["torch"]["cuda"]
    # Found from its files, then imported: the same torch (its distribution's version lacks the +cu130 label).
    assert facts["torch"]["version"] == info["torch"].split("+")[0]
    assert Path(facts["torch"]["lib"]) == Path(info["torch_lib"])


def test_import_modules_in_the_env(torch_py):
    ok = run(torch_py, "native/env_programs/import_modules.py", "json")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")
    bad = run(torch_py, "native/env_programs/import_modules.py", "json", "verlenv_no_such_module")
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines()[-1] == "ModuleNotFoundError: No module named 'verlenv_no_such_module'"
