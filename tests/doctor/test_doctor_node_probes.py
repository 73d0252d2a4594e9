"""The probes of what a run meets on its node (glibc, libstdc++, NCCL variables, memory, Ray's disk, the Megatron
bridge), on real shared objects built here, and a log's findings checked against an env (`doctor LOG --python`)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verlenv.cli import main
from verlenv.doctor import diagnose_text, facts as facts_mod, node_probes, probes, symbols
from verlenv.doctor.facts import Dist, EnvFacts

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "data" / "logs"
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("g++") is None, reason="needs gcc and g++")


def excerpt(name: str) -> str:
    return (LOGS / name).read_text().partition("\n")[2]


def build(out: Path, source: str, compiler: str = "gcc", *flags: str) -> Path:
    src = out.with_suffix(".c" if compiler == "gcc" else ".cpp")
    src.write_text(source)
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(out), str(src), *flags], check=True)
    return out


def env_facts(site: Path, **kw) -> EnvFacts:
    """Facts of an env whose site-packages is `site` (the interpreter's own facts, its folders replaced)."""
    real = facts_mod.gather(sys.executable)
    fields = {**real.__dict__, "site_packages": [str(site)], "distributions": [], "torch": None, **kw}
    return EnvFacts(**fields)


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    """An env's shared objects built by this machine's compilers (glibc 2.34+: pthread_create is GLIBC_2.34)."""
    site = tmp_path_factory.mktemp("site-packages")
    (site / "ext").mkdir()
    threads = build(site / "ext" / "_threads.so", "#include <pthread.h>\n"
                    "static void *run(void *a) { return a; }\n"
                    "int start(void) { pthread_t t; return pthread_create(&t, 0, run, 0); }\n")
    cxx = build(site / "ext" / "_cxx.so",
                "#include <string>\nstd::string greet(const char *w) { return std::string(w) + '!'; }\n", "g++")
    return {"site": site, "threads": threads, "cxx": cxx}


@needs_gcc
def test_an_object_built_for_a_newer_glibc_than_the_node(objects):
    needs = symbols.version_needs(objects["threads"])
    assert "GLIBC_2.34" in needs["libc.so.6"]  # what this machine's toolchain links pthread_create to
    here = node_probes.probe_glibc(env_facts(objects["site"]))
    assert here.status == "ok" and "need at most GLIBC_2.34" in here.summary
    # Test double of an older node: the same objects where glibc is 2.31 (Ubuntu 20.04).
    old = node_probes.probe_glibc(env_facts(objects["site"], glibc="2.31"))
    assert (old.status, old.failure_id) == ("problem", "F39")
    assert old.details["too_new"] == {str(objects["threads"]): "GLIBC_2.34"}


def test_a_wheel_tagged_for_a_newer_glibc(tmp_path):
    info = tmp_path / "vllm-0.20.0.dist-info"
    info.mkdir()
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: bdist_wheel\nRoot-Is-Purelib: false\n"
                                "Tag: cp38-abi3-manylinux_2_31_x86_64\n")
    other = tmp_path / "numpy-2.2.6.dist-info"
    other.mkdir()
    (other / "WHEEL").write_text("Tag: cp312-cp312-manylinux_2_17_x86_64\nTag: cp312-cp312-manylinux2014_x86_64\n")
    assert node_probes.wheel_glibc([str(tmp_path)]) == {"vllm-0.20.0.dist-info": "2.31",
                                                        "numpy-2.2.6.dist-info": "2.17"}
    r = node_probes.probe_glibc(env_facts(tmp_path, glibc="2.28"), needs={})
    assert ((r.status, r.failure_id) == ("problem", "F39")
            and r.details["wheel_tags"] == {"vllm-0.20.0.dist-info": "2.31"})
    assert node_probes.probe_glibc(env_facts(tmp_path, glibc="2.31"), needs={}).status == "ok"


@needs_gcc
def test_the_libstdcxx_the_process_loads_against_what_objects_need(objects, tmp_path):
    needs = symbols.version_needs(objects["cxx"])
    assert any(v.startswith("GLIBCXX_3.4.") for v in needs["libstdc++.so.6"])
    loaded = facts_mod.gather(sys.executable).libstdcxx
    if loaded is None:
        pytest.skip("this interpreter loads no libstdc++")
    assert node_probes.probe_libstdcxx(env_facts(objects["site"], libstdcxx=loaded)).status == "ok"
    # Test double of an old libstdc++ (a conda env's from gcc 5): a library defining versions only up to 3.4.20.
    script = tmp_path / "old.map"
    script.write_text("GLIBCXX_3.4 { global: *; };\nGLIBCXX_3.4.20 { } GLIBCXX_3.4;\nCXXABI_1.3 { } GLIBCXX_3.4;\n")
    old = build(tmp_path / "libstdc++.so.6", "int glibcxx_double(void) { return 0; }\n", "gcc",
                f"-Wl,--version-script={script}")
    assert symbols.version_defs(old) >= {"GLIBCXX_3.4", "GLIBCXX_3.4.20", "CXXABI_1.3"}
    r = node_probes.probe_libstdcxx(env_facts(objects["site"], libstdcxx=str(old)))
    assert (r.status, r.failure_id) == ("problem", "F40") and str(objects["cxx"]) in r.details["missing"]
    assert "GLIBCXX_3.4.20" in r.summary


@needs_gcc
def test_a_second_libnccl_first_on_ld_library_path(tmp_path):
    wheel = tmp_path / "site" / "nvidia" / "nccl" / "lib"
    wheel.mkdir(parents=True)
    build(wheel / "libnccl.so.2", "int ncclGetVersion(int *v) { *v = 22703; return 0; }\n")
    system = tmp_path / "usr-lib"
    system.mkdir()
    build(system / "libnccl.so.2", "int ncclGetVersion(int *v) { *v = 21805; return 0; }\n")  # a system NCCL
    env = {"NCCL_NVLS_ENABLE": "0", "PATH": "/usr/bin"}
    r = node_probes.probe_nccl_env(env, [str(tmp_path / "site")])
    assert r.status == "ok" and r.summary.endswith("NCCL_NVLS_ENABLE=0, VLLM_ALLREDUCE_USE_SYMM_MEM unset, "
                                                   "NCCL_DEBUG unset")
    r = node_probes.probe_nccl_env({**env, "LD_LIBRARY_PATH": f"{system}:/nowhere"}, [str(tmp_path / "site")])
    assert (r.status, r.failure_id) == ("problem", "F17") and str(system / "libnccl.so.2") in r.summary


def test_memory_against_rays_threshold():
    text = Path("/proc/meminfo").read_text()
    used = 1 - node_probes.meminfo(text)["MemAvailable"] / node_probes.meminfo(text)["MemTotal"]
    if used >= 0.95:
        pytest.skip("this machine is itself above Ray's threshold")
    assert node_probes.probe_memory(text, {}).status == "ok"
    r = node_probes.probe_memory(text, {"RAY_memory_usage_threshold": f"{used / 2:.4f}"})
    assert (r.status, r.failure_id) == ("problem", "F35")
    assert "monitor is off" in node_probes.probe_memory(text, {"RAY_memory_monitor_refresh_ms": "0"}).summary
    assert node_probes.probe_memory("", {}).status == "skipped"


def test_rays_session_disk(tmp_path):
    usage = node_probes.disk_usage(tmp_path / "ray" / "not-yet")  # the nearest folder that exists
    assert usage == tuple(shutil.disk_usage(tmp_path))
    share = usage[1] / usage[0]
    if share >= 0.95:
        pytest.skip("this disk is itself above Ray's limit")
    assert node_probes.probe_ray_disk(tmp_path, usage, {}).status == "ok"
    r = node_probes.probe_ray_disk(tmp_path, usage, {"RAY_local_fs_capacity_threshold": f"{share / 2:.4f}"})
    assert (r.status, r.failure_id) == ("problem", "F36")
    assert node_probes.ray_temp_dir({"RAY_TMPDIR": "/scratch"}) == Path("/scratch/ray")


def test_which_bridge_the_megatron_actor_can_use(tmp_path):
    def dists(*pairs):
        return [Dist(n, v, [], str(tmp_path)) for n, v in pairs]

    fsdp = node_probes.probe_megatron(env_facts(tmp_path, distributions=dists(("mbridge", "0.15.1"))))
    assert fsdp.status == "skipped"
    mb = node_probes.probe_megatron(env_facts(tmp_path, distributions=dists(("megatron-core", "0.16.1"),
                                                                          ("mbridge", "0.15.1"))))
    assert (mb.status, mb.failure_id) == ("warning", "F44") and "vanilla_mbridge=True" in mb.summary
    full = node_probes.probe_megatron(env_facts(tmp_path, distributions=dists(("megatron-core", "0.18.2"),
                                                                            ("megatron-bridge", "0.5.2"))))
    assert full.status == "ok" and "Megatron-Bridge 0.5.2 (verl's default bridge)" in full.summary
    # verlenv's megatron env before `verlenv build` has added its source-built Megatron-Bridge.
    bare = node_probes.probe_megatron(env_facts(tmp_path, distributions=dists(("megatron-core", "0.18.2"))))
    assert (bare.status, bare.failure_id) == ("problem", "F44") and "verlenv build megatron-bridge" in bare.summary


def test_every_check_a_family_names_is_a_probe():
    from verlenv.doctor import knowledge

    for f in knowledge.load():
        assert set(f.checks) <= set(probes.PROBES), f.id


def test_a_logs_findings_are_checked_against_an_env():
    facts = facts_mod.gather(sys.executable)
    checks = probes.check_findings(diagnose_text(excerpt("F41-pytorch-177472.log") + excerpt("F44-verl-6931.log")),
                                   facts)
    assert [r.name for r in checks["F41"]] == ["nccl-env"]
    assert [r.name for r in checks["F44"]] == ["megatron", "packages"]
    assert "F17" not in checks  # a family without checks adds nothing
    assert checks["F44"][1].summary.startswith("megatron-core ")


def test_the_cli_checks_a_logs_findings_against_the_env_given(tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text(excerpt("F39-flash-attention-1708.log"))
    assert main(["doctor", str(log), "--python", sys.executable, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["python"] == facts_mod.gather(sys.executable).executable
    (glibc,) = report["checks"]["F39"]
    assert glibc["probe"] == "glibc" and glibc["status"] in ("ok", "problem", "skipped")
    assert main(["doctor", str(log), "--python", sys.executable]) == 1
    assert f"checked against the env of {report['python']}:" in capsys.readouterr().out


def test_doctor_without_python_probes_the_stacks_env_as_verify_does(tmp_path):
    stack_env = ROOT / ".venv-verl-0.9-fsdp" / "bin" / "python"
    if not stack_env.exists():
        pytest.skip(f"no stack env at {stack_env} (nox -s env)")
    environ = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
    cmd = [sys.executable, "-m", "verlenv", "doctor", "--json", "--only", "nccl-env"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=environ, check=False)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["python"] == str(stack_env)
    # An active env other than verlenv's own is the one probed (a user's `source env/bin/activate`).
    other = tmp_path / "other"
    subprocess.run(["uv", "venv", "-q", "-p", sys.executable, str(other)], check=True)
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**environ, "VIRTUAL_ENV": str(other)},
                       check=False)
    assert json.loads(p.stdout)["python"] == str(other / "bin" / "python")


def fake_proc(root: Path, processes: dict[int, list[str]]) -> Path:
    """A /proc of the given processes (pid -> argv), as the kernel lays out cmdline: NUL-separated (test double: the
    real /proc of this machine holds whatever else runs)."""
    for pid, argv in processes.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (root / "self").mkdir()
    return root


def test_ray_instances_are_the_gcs_servers_of_the_host(tmp_path):
    gcs = "/env/lib/python3.12/site-packages/ray/core/src/ray/gcs/gcs_server"
    proc = fake_proc(tmp_path / "proc", {
        41: [gcs, "--log_dir=/tmp/vray-a/ray/session_2026-12-08_02-32-51_8_41/logs", "--gcs_server_port=0"],
        7: [gcs, "--gcs_server_port=6379"],
        12: ["/usr/bin/python3", "-c", "print('gcs_server')"],  # the name in an argument is not the program
        13: ["/env/bin/raylet", "--gcs-address=127.0.0.1:6379"]})
    found = node_probes.ray_instances(proc)
    assert [(i["pid"], i["session"]) for i in found] == [
        (7, None), (41, "/tmp/vray-a/ray/session_2026-12-08_02-32-51_8_41")]


def test_two_ray_instances_on_a_host_with_verl_are_a_warning_one_is_not(tmp_path):
    with_verl = env_facts(tmp_path, distributions=[Dist("verl", "0.9.1", [], str(tmp_path))])
    one = [{"pid": 7, "uid": 0, "session": None}]
    two = one + [{"pid": 41, "uid": 1000, "session": "/tmp/vray-a/ray/session_x"}]
    assert node_probes.probe_ray_instances([], with_verl).status == "ok"
    assert node_probes.probe_ray_instances(one, with_verl).status == "ok"
    warned = node_probes.probe_ray_instances(two, with_verl)
    assert (warned.status, warned.failure_id) == ("warning", "F70")
    assert "2 Ray instances" in warned.summary and "7, 41" in warned.summary
    assert warned.fix[0].startswith("start one Ray on the node first (ray start --head)")
    assert node_probes.probe_ray_instances(two, env_facts(tmp_path)).status == "skipped"  # no verl, no socket
