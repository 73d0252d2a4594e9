"""Bad input to every subcommand: exit 2, one line naming the input, what is wrong and what is valid, no
traceback, and nothing started or left behind. Each row runs the `verlenv` entry point on real files."""

import contextlib
import io
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest

import tiny_project
from reliability_log import record
from verlenv import cli

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    # Each must appear in the one line: the input named, and what is wrong or valid.
    expect: tuple[str, ...]
    env: dict = field(default_factory=dict)
    project: str = "repo"  # repo (this checkout), tiny (an offline project), edited, unrecorded (its lock's variants)


CASES = [
    # render / lock: the catalog they read
    Case("render-catalog-dir", ("render", "--catalog", "{tmp}/dir"), ("{tmp}/dir", "a directory")),
    Case("render-catalog-binary", ("render", "--catalog", "{tmp}/binary.bin"), ("binary.bin", "not UTF-8")),
    Case("lock-check-catalog-dir", ("lock", "--check", "--catalog", "{tmp}/dir"), ("{tmp}/dir", "a directory")),
    Case("lock-check-catalog-binary", ("lock", "--check", "--catalog", "{tmp}/binary.bin"),
         ("binary.bin", "not UTF-8")),
    Case("lock-check-catalog-latin1", ("lock", "--check", "--catalog", "{tmp}/latin1.toml"),
         ("latin1.toml", "not UTF-8")),
    Case("lock-check-catalog-missing", ("lock", "--check", "--catalog", "{tmp}/none.toml"),
         ("none.toml", "no such file")),
    Case("lock-check-catalog-not-toml", ("lock", "--check", "--catalog", "{tmp}/file.txt"),
         ("file.txt", "not valid TOML")),
    Case("lock-unknown-stack", ("lock", "--check", "--stack", "nope"), ("'nope'", "valid: verl-0.9")),
    # install: the lock, the prefix, the interpreter
    Case("install-edited-lock", ("install", "--prefix", "{tmp}/env"), ("edited after", "verlenv lock --stack tiny"),
         project="edited"),
    Case("install-lock-without-record", ("install", "--prefix", "{tmp}/env"),
         ("tiny-fsdp.inputs.json: missing", "verlenv lock"), project="unrecorded"),
    Case("install-prefix-is-file", ("install", "--prefix", "{tmp}/file.txt"),
         ("--prefix {tmp}/file.txt", "not a directory"), project="tiny"),
    Case("install-prefix-under-file", ("install", "--prefix", "{tmp}/file.txt/env"),
         ("{tmp}/file.txt", "not a directory"), project="tiny"),
    Case("install-prefix-unwritable", ("install", "--prefix", "/proc/verlenv-env"),
         ("--prefix /proc/verlenv-env", "cannot create"), project="tiny"),
    Case("install-prefix-not-an-env", ("install", "--prefix", "{tmp}/notenv"),
         ("{tmp}/notenv", "neither empty nor an env"), project="tiny"),
    Case("install-python-missing", ("install", "--prefix", "{tmp}/env", "--python", "{tmp}/python9"),
         ("--python {tmp}/python9", "no such file"), project="tiny"),
    Case("install-python-not-executable", ("install", "--prefix", "{tmp}/env", "--python", "{tmp}/file.txt"),
         ("--python {tmp}/file.txt", "not an executable"), project="tiny"),
    Case("install-python-dir", ("install", "--prefix", "{tmp}/env", "--python", "{tmp}/dir"),
         ("--python {tmp}/dir", "not an executable"), project="tiny"),
    Case("install-python-not-python", ("install", "--prefix", "{tmp}/env", "--python", "/bin/true"),
         ("--python /bin/true", "not a Python interpreter"), project="tiny"),
    Case("install-python-wrong-version", ("install", "--prefix", "{tmp}/env", "--python", "{tmp}/python-other"),
         ("--python {tmp}/python-other", "the stack needs Python 3.12")),
    Case("install-conda-none-active", ("install", "--conda"), ("--conda", "no conda env is active"), project="tiny"),
    Case("install-conda-prefix-missing", ("install", "--conda"), ("CONDA_PREFIX={tmp}/conda", "no conda env there"),
         env={"CONDA_PREFIX": "{tmp}/conda"}, project="tiny"),
    Case("install-unknown-variant", ("install", "--variant", "deepspeed"), ("'deepspeed'", "valid: fsdp, megatron")),
    Case("install-unknown-installer", ("install", "--installer", "conda"), ("'conda'", "choose from")),
    # toolchain
    Case("toolchain-python-missing", ("toolchain", "--python", "{tmp}/python9"),
         ("--python {tmp}/python9", "no such file")),
    Case("toolchain-cuda-home-missing", ("toolchain",), ("CUDA_HOME={tmp}/cuda", "no such directory"),
         env={"CUDA_HOME": "{tmp}/cuda"}),
    Case("toolchain-cuda-home-no-nvcc", ("toolchain",), ("CUDA_HOME={tmp}/dir", "no bin/nvcc"),
         env={"CUDA_HOME": "{tmp}/dir"}),
    # build: every knob before a toolchain is looked for or a source unpacked
    Case("build-jobs-negative", ("build", "flash-attn", "--python", PY, "--jobs", "-3"),
         ("--jobs", "'-3'", "positive whole number")),
    Case("build-jobs-zero", ("build", "flash-attn", "--python", PY, "--jobs", "0"),
         ("--jobs", "'0'", "positive whole number")),
    Case("build-jobs-word", ("build", "flash-attn", "--python", PY, "--jobs", "abc"),
         ("--jobs", "'abc'", "positive whole number")),
    Case("build-threads-negative", ("build", "flash-attn", "--python", PY, "--threads", "-1"),
         ("--threads", "'-1'", "positive")),
    Case("build-max-jobs-env-word", ("build", "flash-attn", "--python", PY, "--archs", "9.0"),
         ("MAX_JOBS='abc'", "from the environment", "positive whole number"), env={"MAX_JOBS": "abc"}),
    Case("build-max-jobs-env-negative", ("build", "flash-attn", "--python", PY, "--archs", "9.0"),
         ("MAX_JOBS='-2'", "positive whole number"), env={"MAX_JOBS": "-2"}),
    Case("build-nvcc-threads-env", ("build", "flash-attn", "--python", PY, "--archs", "9.0"),
         ("NVCC_THREADS='two'", "positive whole number"), env={"NVCC_THREADS": "two"}),
    Case("build-apex-parallel-env", ("build", "apex", "--variant", "megatron", "--python", PY, "--archs", "9.0"),
         ("APEX_PARALLEL_BUILD='0'", "positive whole number"), env={"APEX_PARALLEL_BUILD": "0"}),
    Case("build-archs-empty-part", ("build", "flash-attn", "--python", PY, "--archs", "x;;9"),
         ("--archs 'x;;9'", "'x', '', '9' is not a CUDA arch", "e.g. '8.0;9.0'")),
    Case("build-archs-empty", ("build", "flash-attn", "--python", PY, "--archs", ""),
         ("--archs ''", "not a CUDA arch")),
    Case("build-cuda-home-missing", ("build", "flash-attn", "--python", PY, "--archs", "9.0"),
         ("CUDA_HOME={tmp}/cuda", "no such directory"), env={"CUDA_HOME": "{tmp}/cuda"}),
    Case("build-source-missing",
         ("build", "flash-attn", "--python", PY, "--archs", "9.0", "--source", "{tmp}/fa.tar.gz"),
         ("--source {tmp}/fa.tar.gz", "no such file")),
    Case("build-source-dir-for-sdist",
         ("build", "flash-attn", "--python", PY, "--archs", "9.0", "--source", "{tmp}/dir"),
         ("--source {tmp}/dir", "not a regular file")),
    Case("build-source-file-for-git", ("build", "apex", "--variant", "megatron", "--python", PY, "--archs", "9.0",
                                       "--source", "{tmp}/file.txt"), ("--source {tmp}/file.txt", "not a tar archive",
                                                                      "clone or mirror")),
    Case("build-bundle-missing", ("build", "flash-attn", "--python", PY, "--archs", "9.0", "--bundle", "{tmp}/none"),
         ("no bundle at {tmp}/none",)),
    Case("build-bundle-not-a-bundle",
         ("build", "flash-attn", "--python", PY, "--archs", "9.0", "--bundle", "{tmp}/dir"),
         ("{tmp}/dir is not a bundle",)),
    Case("build-wheelhouse-is-file",
         ("build", "flash-attn", "--python", PY, "--archs", "9.0", "--wheelhouse", "{tmp}/file.txt"),
         ("--wheelhouse {tmp}/file.txt", "not a directory")),
    Case("build-json-dir", ("build", "flash-attn", "--python", PY, "--archs", "9.0", "--json", "{tmp}/dir"),
         ("--json {tmp}/dir", "a directory")),
    Case("build-json-unwritable",
         ("build", "flash-attn", "--python", PY, "--archs", "9.0", "--json", "/proc/build.json"),
         ("--json /proc/build.json", "cannot write there")),
    Case("build-python-missing", ("build", "flash-attn", "--python", "{tmp}/python9", "--archs", "9.0"),
         ("--python {tmp}/python9", "no such file")),
    Case("build-unknown-package", ("build", "flashattn", "--python", PY, "--archs", "9.0"),
         ("'flashattn'", "recipes:")),
    # verify: the report's paths are checked before any check runs
    Case("verify-report-unwritable", ("verify", "--python", PY, "--report", "/proc/verify.json"),
         ("--report /proc/verify.json", "cannot write there")),
    Case("verify-report-dir", ("verify", "--python", PY, "--report", "{tmp}/dir"),
         ("--report {tmp}/dir", "a directory")),
    Case("verify-markdown-unwritable",
         ("verify", "--python", PY, "--markdown", "/proc/verify.md", "--report", "{tmp}/r.json"),
         ("--markdown /proc/verify.md", "cannot write there")),
    Case("verify-markdown-under-file",
         ("verify", "--python", PY, "--markdown", "{tmp}/file.txt/v.md", "--report", "{tmp}/r.json"),
         ("--markdown {tmp}/file.txt/v.md", "not a directory")),
    Case("verify-timeout-negative", ("verify", "--python", PY, "--timeout", "-1"), ("--timeout -1", "positive")),
    Case("verify-timeout-word", ("verify", "--python", PY, "--timeout", "soon"), ("--timeout", "'soon'")),
    Case("verify-rollout-tp-zero", ("verify", "--python", PY, "--rollout-tp", "0"),
         ("--rollout-tp", "'0'", "positive whole number")),
    Case("verify-actor-tp-word", ("verify", "--python", PY, "--variant", "megatron", "--actor-tp", "two"),
         ("--actor-tp", "'two'", "positive whole number")),
    Case("verify-actor-tp-fsdp", ("verify", "--python", PY, "--actor-tp", "2"),
         ("--actor-tp 2", "actor of the fsdp variant is not tensor-parallel", "--variant megatron")),
    Case("verify-actor-tp-fsdp-ray", ("verify", "--python", PY, "--ray", "--actor-tp", "2"),
         ("--actor-tp 2", "actor of the fsdp variant is not tensor-parallel")),
    Case("verify-unknown-gpu", ("verify", "--gpu", "z100"), ("z100",)),
    Case("verify-lock-missing", ("verify", "--python", PY, "--lock", "{tmp}/none.txt"),
         ("--lock {tmp}/none.txt", "no such file")),
    Case("verify-python-missing", ("verify", "--python", "{tmp}/python9"), ("--python {tmp}/python9", "no such file")),
    Case("verify-only-unknown", ("verify", "--python", PY, "--only", "tensorflow"), ("--only tensorflow", "valid:")),
    Case("verify-family-all-and-unknown", ("verify", "--python", PY, "--family", "all", "--family", "nope"),
         ("--family nope", "unknown family; valid:", "all")),
    Case("verify-timeout-nan", ("verify", "--python", PY, "--timeout", "nan"),
         ("--timeout nan", "positive, finite number of seconds")),
    Case("verify-timeout-inf", ("verify", "--python", PY, "--timeout", "inf"),
         ("--timeout inf", "positive, finite number of seconds")),
    Case("verify-node-timeout-nan", ("verify", "--python", PY, "--ray", "--node-timeout", "nan"),
         ("--node-timeout nan", "positive, finite number of seconds")),
    # doctor
    Case("doctor-log-missing", ("doctor", "{tmp}/none.log"), ("{tmp}/none.log", "no such file")),
    Case("doctor-max-gb-nan", ("doctor", "{tmp}/dir", "--max-gb", "nan"), ("--max-gb nan", "finite number")),
    Case("doctor-node-timeout-nan", ("doctor", "--ray", "--node-timeout", "nan"),
         ("--node-timeout nan", "positive, finite number of seconds")),
    Case("doctor-lock-binary", ("doctor", "--lock", "{tmp}/binary.bin", "--only", "lock-drift"),
         ("--lock {tmp}/binary.bin", "not UTF-8")),
    Case("doctor-python-missing", ("doctor", "--python", "{tmp}/python9"), ("--python {tmp}/python9", "no such")),
    Case("doctor-log-with-probe-option", ("doctor", "{tmp}/file.txt", "--lock", "{tmp}/file.txt"),
         ("--lock", "without LOG")),
    Case("doctor-log-python-missing", ("doctor", "{tmp}/file.txt", "--python", "{tmp}/python9"),
         ("--python {tmp}/python9", "no such")),
    Case("doctor-max-files-negative", ("doctor", "{tmp}/dir", "--max-files", "-1"), ("--max-files -1", "positive")),
    Case("doctor-max-files-without-log", ("doctor", "--max-files", "5"), ("--max-files", "LOG directory")),
    Case("doctor-log-with-ray", ("doctor", "{tmp}/file.txt", "--ray"), ("--ray", "without LOG")),
    # bundle / install --bundle: the kernel cache folder
    Case("bundle-kernel-cache-missing", ("bundle", "--stack", "tiny", "--kernel-cache", "{tmp}/none"),
         ("--kernel-cache {tmp}/none", "no such folder"), project="tiny"),
    Case("bundle-kernel-cache-is-file", ("bundle", "--stack", "tiny", "--kernel-cache", "{tmp}/file.txt"),
         ("--kernel-cache {tmp}/file.txt", "no such folder"), project="tiny"),
    Case("install-kernel-cache-into-without-bundle", ("install", "--kernel-cache-into", "{tmp}/k"),
         ("--kernel-cache-into", "with --bundle"), project="tiny"),
    Case("bundle-kernel-cache-empty", ("bundle", "--stack", "tiny", "--kernel-cache", "{tmp}/dir"),
         ("--kernel-cache {tmp}/dir", "holds no files"), project="tiny"),
    # bundle: a build's inputs, refused before anything is downloaded
    Case("bundle-git-source-not-given", ("bundle", "--stack", "verl-0.9", "--variant", "megatron", "--no-built",
                                         "--build-inputs"), ("apex", "--source apex=", "clone or mirror")),
    Case("bundle-source-without-build-inputs", ("bundle", "--stack", "tiny", "--source", "apex={tmp}/dir"),
         ("--source", "with --build-inputs"), project="tiny"),
    Case("bundle-source-not-name-path", ("bundle", "--stack", "verl-0.9", "--variant", "megatron", "--no-built",
                                         "--build-inputs", "--source", "{tmp}/dir"),
         ("--source '{tmp}/dir'", "NAME=PATH")),
    Case("bundle-source-not-left-out", ("bundle", "--stack", "tiny", "--build-inputs", "--source", "apex={tmp}/dir"),
         ("--source apex=", "valid: none"), project="tiny"),
    Case("bundle-source-file-for-git", ("bundle", "--stack", "verl-0.9", "--variant", "megatron", "--no-built",
                                        "--build-inputs", "--source", "apex={tmp}/file.txt"),
         ("--source apex: {tmp}/file.txt", "not a tar archive")),
    Case("bundle-toolkit-missing", ("bundle", "--stack", "tiny", "--toolkit", "{tmp}/none"),
         ("--toolkit {tmp}/none", "no such directory"), project="tiny"),
    Case("bundle-toolkit-without-nvcc", ("bundle", "--stack", "tiny", "--toolkit", "{tmp}/dir"),
         ("--toolkit {tmp}/dir", "no bin/nvcc"), project="tiny"),
    # the command itself
    Case("unknown-command", ("deploy",), ("'deploy'", "choose from")),
]


PROJECTS = {"repo": "", "tiny": "", "edited": " (its lock edited after `verlenv lock` wrote it)",
            "unrecorded": " (its lock's inputs record missing)"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """The bad inputs: a folder, binary and latin-1 files, a plain file, a non-env folder, and offline projects
    whose lock is fine, edited after `verlenv lock` wrote it, or has no inputs record."""
    tmp = tmp_path_factory.mktemp("inputs")
    (tmp / "dir").mkdir()
    (tmp / "binary.bin").write_bytes(bytes(range(256)) * 8)
    (tmp / "latin1.toml").write_bytes('default = "café"\n'.encode("latin-1"))
    (tmp / "file.txt").write_text("hello\n")
    # A Python other than the default stack's 3.12 (this one, unless it is 3.12 itself).
    other = PY if sys.version_info[:2] != (3, 12) else shutil.which("python3.11") or shutil.which("python3.13")
    (tmp / "python-other").symlink_to(other)
    (tmp / "notenv").mkdir()
    (tmp / "notenv" / "notes.txt").write_text("mine\n")
    tiny = tiny_project.make(tmp / "tiny", data_mib=0)
    edited = tmp / "edited"
    shutil.copytree(tiny, edited)
    lock = edited / "locks" / "tiny-fsdp.linux-64.txt"
    lock.write_text(lock.read_text().replace("tiny0==1.0", "tiny0==1.0 ; python_version > '3'"))
    unrecorded = tmp / "unrecorded"
    shutil.copytree(tiny, unrecorded)
    (unrecorded / "locks" / "tiny-fsdp.inputs.json").unlink()
    return tmp


def run_case(case: Case, tmp: Path) -> subprocess.CompletedProcess:
    """The `verlenv` entry point (cli.main) in this process, with the case's environment, from the inputs'
    folder; an exception escaping it is what a user would see as a traceback, and fails the test."""
    fill = lambda text: text.replace("{tmp}", str(tmp))  # noqa: E731
    root = ROOT if case.project == "repo" else tmp / case.project
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_HOME", "MAX_JOBS", "NVCC_THREADS", "APEX_PARALLEL_BUILD", "VIRTUAL_ENV", "CONDA_PREFIX")}
    env = {**(env if case.project == "repo" else tiny_project.env(root)), **{k: fill(v) for k, v in case.env.items()}}
    env["VERLENV_ROOT"] = str(root)
    argv = list(map(fill, case.argv))
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        os.chdir(tmp)
        try:
            code = cli.main(argv)
        except SystemExit as e:  # argparse's own exit
            code = e.code
        finally:
            os.chdir(here)
    return subprocess.CompletedProcess(["verlenv", *argv], code, out.getvalue(), err.getvalue())


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_exit_2(case: Case, inputs: Path):
    before = sorted(p.name for p in inputs.iterdir())
    r = run_case(case, inputs)
    line = r.stderr.strip()
    shown = line.replace(str(inputs), "{tmp}")
    ok = (r.returncode == 2 and "\n" not in line and "Traceback" not in r.stderr
          and all(e.replace("{tmp}", str(inputs)) in line for e in case.expect))
    record("bad input", f"`verlenv {' '.join(case.argv)}`" + "".join(f" with {k}={v}" for k, v in case.env.items())
           + PROJECTS[case.project],
           f"exit {r.returncode}: {shown}", ok)
    assert r.returncode == 2, r.stderr
    assert "\n" not in line and "Traceback" not in r.stderr, r.stderr
    for e in case.expect:
        assert e.replace("{tmp}", str(inputs)) in line, line
    # Nothing started: no env, build tree or report appeared among the inputs.
    assert sorted(p.name for p in inputs.iterdir()) == before
