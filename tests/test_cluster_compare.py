"""The cluster report's parts that need no cluster: fingerprint facts read from real dist-info folders, the
differences between nodes, the exit code and the table, and `verify --ray`'s bad input."""

import hashlib
import json
import subprocess
import sys
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
from rich.console import Console

from verlenv.cluster import compare, fact_kinds, fingerprint, launch

sys.path.insert(0, str(Path(__file__).parent))

VERLENV = Path(sys.executable).with_name("verlenv")
ROOT = Path(__file__).resolve().parents[1]


def dist_info(site: Path, name: str, version: str, record: str, direct_url: str | None = None) -> Path:
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (folder / "RECORD").write_text(record)
    if direct_url:
        (folder / "direct_url.json").write_text(json.dumps({"url": direct_url, "archive_info": {}}))
    return folder


def test_packages_name_versions_and_record_digests(tmp_path):
    dist_info(tmp_path, "torch", "2.11.0", "torch/__init__.py,sha256=abc,10\n")
    dist_info(tmp_path, "numpy", "2.3.5", "numpy/__init__.py,sha256=def,10\n")
    facts = fingerprint.packages([str(tmp_path)])
    assert facts["package:torch"] == "2.11.0" and facts["package:numpy"] == "2.3.5"
    assert facts["record:torch"] == hashlib.sha256(b"torch/__init__.py,sha256=abc,10\n").hexdigest()
    assert "record:numpy" not in facts  # only the protected builds carry their RECORD
    before = facts["installed-set"]

    (tmp_path / "torch-2.11.0.dist-info" / "RECORD").write_text("torch/__init__.py,sha256=abd,10\n")
    changed = fingerprint.packages([str(tmp_path)])
    assert changed["record:torch"] != facts["record:torch"] and changed["installed-set"] == before


def test_two_installs_of_one_name_are_both_listed(tmp_path):
    dist_info(tmp_path / "a", "numpy", "2.3.5", "")
    dist_info(tmp_path / "b", "numpy", "1.26.4", "")
    assert fingerprint.packages([str(tmp_path / "a"), str(tmp_path / "b")])["package:numpy"] == "1.26.4, 2.3.5"


def test_abi_fingerprint_is_the_wheel_cache_folder(tmp_path):
    dist_info(tmp_path, "flash-attn", "2.8.3.post2", "",
              "file:///shared/wheelhouse/flash-attn/3f2a9c/flash_attn-2.8.3.post2-cp312-cp312-linux_x86_64.whl")
    dist_info(tmp_path, "apex", "0.1", "", "file:///home/u/apex")
    facts = fingerprint.abi_fingerprints(["flash-attn", "apex", "transformer-engine-torch"], [str(tmp_path)])
    assert facts["abi:flash-attn"] == "3f2a9c"
    assert facts["abi:apex"].startswith("not from the wheel cache: file:///home/u/apex")
    assert "abi:transformer-engine-torch" not in facts


def test_env_vars_as_workers_see_them():
    facts = fingerprint.env_vars({"NCCL_SOCKET_IFNAME": "ib0", "VLLM_HOST_IP": "10.0.0.1", "HOME": "/root",
                                  "PYTHONPATH": "/opt/x:/tmp/ray/session_1/runtime_resources/py_modules_files/"
                                                "_ray_pkg"})
    assert facts["env:NCCL_SOCKET_IFNAME"] == "ib0" and facts["env:VLLM_HOST_IP"] == "10.0.0.1"
    assert facts["env:NCCL_CUMEM_ENABLE"] is None and facts["env:CUDA_VISIBLE_DEVICES"] is None  # unset is a value
    assert facts["env:PYTHONPATH"] == "/opt/x"  # Ray's own per-node folder is not the node's setting
    assert "env:HOME" not in facts


def test_nccl_net_plugin_found_on_the_library_path(tmp_path):
    assert fingerprint.nccl_net_plugins({"LD_LIBRARY_PATH": str(tmp_path)}).find(str(tmp_path)) == -1
    (tmp_path / "libnccl-net.so").write_bytes(b"")
    assert str(tmp_path / "libnccl-net.so") in fingerprint.nccl_net_plugins({"LD_LIBRARY_PATH": str(tmp_path)})


def test_jit_caches_follow_their_variables(tmp_path):
    facts = fingerprint.jit_caches({"TRITON_CACHE_DIR": str(tmp_path), "VLLM_CACHE_ROOT": str(tmp_path / "v")})
    assert facts["jit-cache:triton"] == f"{tmp_path} (writable)"
    assert facts["jit-cache:vllm"] == f"{tmp_path / 'v'} (can be created)"


def test_majority_names_the_odd_node():
    fps = {"a": {"package:numpy": "2.3.5", "python": "3.12.1"}, "b": {"package:numpy": "2.3.5", "python": "3.12.1"},
           "c": {"package:numpy": "1.26.4", "python": "3.12.1"}}
    assert compare.differences(fps) == [{"fact": "package:numpy", "values": {"a": "2.3.5", "b": "2.3.5", "c": "1.26.4"},
                                         "odd_nodes": ["c"]}]


def test_a_tie_names_every_node_and_absence_is_a_value():
    diff = compare.differences({"a": {"package:apex": "0.1"}, "b": {}})
    assert diff == [{"fact": "package:apex", "values": {"a": "0.1", "b": None}, "odd_nodes": ["a", "b"]}]


def test_gpu_facts_compare_among_gpu_nodes_only():
    head = {"gpu:count": "0", "gpu:model": None, "gpu:driver": None}
    gpu = {"gpu:count": "8", "gpu:model": "NVIDIA H100 80GB HBM3", "gpu:driver": "580.95.05"}
    assert compare.differences({"head": head, "w1": gpu, "w2": dict(gpu)}) == []
    other = {**gpu, "gpu:model": "NVIDIA A100-SXM4-80GB"}
    diff = compare.differences({"head": head, "w1": gpu, "w2": gpu, "w3": other})
    assert [(d["fact"], d["odd_nodes"], list(d["values"])) for d in diff] == [("gpu:model", ["w3"], ["w1", "w2", "w3"])]


def test_placement_is_shown_never_compared():
    """The H100 run of issue 27: two raylets of one host, one GPU each; only their placement differs."""
    same = {"gpu:count": "1", "record:torch": "aa", "env:NCCL_CUMEM_ENABLE": None}
    fps = {"127.0.0.1": {**same, "env:CUDA_VISIBLE_DEVICES": "0", "env:SLURM_NODEID": "0", "node:ip": "127.0.0.1",
                         "env:VLLM_HOST_IP": "127.0.0.1", "env:SLURM_JOB_ID": "7"},
           "127.0.0.2": {**same, "env:CUDA_VISIBLE_DEVICES": "1", "env:SLURM_NODEID": "1", "node:ip": "127.0.0.2",
                         "env:VLLM_HOST_IP": "127.0.0.2", "env:SLURM_JOB_ID": "7"}}
    assert compare.differences(fps) == []
    assert [p["fact"] for p in compare.placement(fps)] == ["env:CUDA_VISIBLE_DEVICES", "env:SLURM_NODEID",
                                                           "env:VLLM_HOST_IP", "node:ip"]  # the job id is equal
    assert compare.placement(fps)[0]["values"] == {"127.0.0.1": "0", "127.0.0.2": "1"}
    fps["127.0.0.2"]["env:PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    assert [(d["fact"], d["odd_nodes"]) for d in compare.differences(fps)] == [
        ("env:PYTORCH_CUDA_ALLOC_CONF", ["127.0.0.1", "127.0.0.2"])]


@pytest.mark.parametrize("fact, kind", [
    ("env:CUDA_VISIBLE_DEVICES", "placement"), ("env:NVIDIA_VISIBLE_DEVICES", "placement"),
    ("env:ROCR_VISIBLE_DEVICES", "placement"), ("env:SLURM_PROCID", "placement"), ("env:SLURMD_NODENAME", "placement"),
    ("env:LOCAL_RANK", "placement"), ("env:RANK", "placement"), ("env:VLLM_HOST_IP", "placement"),
    ("node:hostname", "placement"), ("node:id", "placement"),
    # What changes how the job runs stays identity: NCCL's and the allocator's settings, vLLM's, the libraries.
    ("env:NCCL_CUMEM_ENABLE", "identity"), ("env:NCCL_SOCKET_IFNAME", "identity"), ("env:NCCL_NVLS_ENABLE", "identity"),
    ("env:TORCH_NCCL_ASYNC_ERROR_HANDLING", "identity"), ("env:PYTORCH_CUDA_ALLOC_CONF", "identity"),
    ("env:VLLM_USE_V1", "identity"), ("env:LD_LIBRARY_PATH", "identity"), ("env:WORLD_SIZE", "identity"),
    ("verlenv-env", "identity"), ("installed-set", "identity"), ("record:torch", "identity"),
    ("abi:flash-attn", "identity"), ("torch:nccl", "identity"), ("python:executable", "identity"),
    ("gpu:driver", "identity among GPU nodes"),
])
def test_the_table_decides_each_facts_kind(fact, kind):
    assert fact_kinds.kind(fact) == kind


def test_every_fact_a_node_computes_has_a_row_of_its_own():
    """No fact falls through to the table's catch-all: each kind was decided on purpose."""
    facts = fingerprint.compute([], {"PATH": "/usr/bin", "SLURM_NODEID": "3", "SLURMD_NODENAME": "n3",
                                     "NCCL_IB_HCA": "mlx5", "VERL_X": "1"})
    assert {"node:hostname", "env:SLURM_NODEID", "env:SLURMD_NODENAME", "env:NVIDIA_VISIBLE_DEVICES"} <= set(facts)
    catch_all = fact_kinds.TABLE[-1]
    for fact in facts:
        row = next(r for r in fact_kinds.TABLE if fnmatchcase(fact, r.pattern))
        assert row is not catch_all, fact


def test_readme_prints_the_table():
    assert fact_kinds.markdown() in (ROOT / "README.md").read_text()


def _node(name: str, state: str = "checked", failed: bool = False) -> dict:
    result = {"name": "intact/torch", "package": "torch", "status": "fail" if failed else "pass", "required": True,
              "reason": "1 file missing" if failed else "ok"}
    return {"name": name, "state": state, "results": [result] if state == "checked" else [],
            **({"error": "no answer within 60 s"} if state != "checked" else {})}


@pytest.mark.parametrize("nodes, differences, reduce, expected", [
    ([_node("a"), _node("b")], [], {"ok": True, "skipped": "no GPU"}, 0),
    ([_node("a"), _node("b", failed=True)], [], None, 1),
    ([_node("a"), _node("b", "hung")], [], None, 1),
    ([_node("a"), _node("b")], [{"fact": "python", "values": {"a": "3.12.1", "b": "3.12.3"}, "odd_nodes": ["a", "b"]}],
     None, 1),
    ([_node("a"), _node("b")], [], {"ok": False, "error": "Timeout", "backend": "nccl", "world": 16}, 1),
    ([], [], None, 1),
])
def test_exit_code(nodes, differences, reduce, expected):
    assert launch.exit_code({"nodes": nodes, "differences": differences, "allreduce": reduce}) == expected


def test_table_names_nodes_checks_and_differences():
    data = {"nodes": [_node("10.0.0.1"), _node("10.0.0.2", failed=True), _node("10.0.0.3", "died")],
            "differences": [{"fact": "record:torch", "values": {"10.0.0.1": "aa", "10.0.0.2": "bb"},
                             "odd_nodes": ["10.0.0.2"]}], "allreduce": None, "exit_code": 1}
    console = Console(record=True, width=200)
    launch.print_report(data, console)
    text = console.export_text()
    assert "10.0.0.2 intact/torch: 1 file missing" in text
    assert "10.0.0.3 died: no answer within 60 s" in text
    assert "record:torch" in text and "10.0.0.2 *" in text and "result: FAIL" in text


def test_table_shows_placement_apart_from_differences():
    data = {"nodes": [_node("10.0.0.1"), _node("10.0.0.2")], "differences": [], "allreduce": None, "exit_code": 0,
            "placement": [{"fact": "env:CUDA_VISIBLE_DEVICES", "values": {"10.0.0.1": "0", "10.0.0.2": "1"}}]}
    console = Console(record=True, width=200)
    launch.print_report(data, console)
    text = console.export_text()
    assert "placement (shown, not compared)" in text and "env:CUDA_VISIBLE_DEVICES" in text
    assert "fingerprints: the env is identical on every node that answered" in text and "result: pass" in text


@pytest.mark.parametrize("world, shown", [(1, "bus bandwidth not meaningful with one rank"),
                                         (2, "bus bandwidth 2 MiB 28.0 GB/s, 512 MiB 316.0 GB/s")])
def test_allreduce_line_reports_bus_bandwidth_only_across_ranks(world, shown):
    rows = [{"bytes": 2 << 20, "busbw_gbps": 28.0 if world > 1 else 0.0},
            {"bytes": 512 << 20, "busbw_gbps": 316.0 if world > 1 else 0.0}]
    data = {"nodes": [_node("a")], "differences": [], "exit_code": 0,
            "allreduce": {"ok": True, "backend": "nccl", "world": world, "nodes": 1, "rows": rows}}
    console = Console(record=True, width=200)
    launch.print_report(data, console)
    assert f"all-reduce (nccl, {world} ranks on 1 node(s)): exact sums; {shown}" in console.export_text()


@pytest.mark.parametrize("extra, message", [
    (["--node-timeout", "0"], "--node-timeout 0: must be a positive number of seconds"),
    (["--markdown", "{tmp}/x.md"], "--markdown: not with --ray (its report is the JSON and the tables)"),
    (["--runtime-env", "{tmp}/none.json"], "none.json: No such file or directory"),
    (["--runtime-env", "{tmp}/list.json"],
     'list.json: must be a JSON object (a Ray runtime_env, e.g. {"env_vars": {...}})'),
    (["--runtime-env", "{tmp}/bad.json"], "bad.json: not JSON (Expecting value: line 1 column 1 (char 0))"),
])
def test_bad_input_is_one_line_and_exit_2(extra, message, tmp_path):
    (tmp_path / "list.json").write_text('["env_vars"]')
    (tmp_path / "bad.json").write_text("env_vars: {}")
    extra = [a.format(tmp=tmp_path) for a in extra]
    proc = subprocess.run([str(VERLENV), "verify", "--ray", *extra, "--no-lock", "--python", sys.executable],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith(message)
    assert not (tmp_path / "x.md").exists()


def test_doctor_bad_probe_is_one_line_and_exit_2():
    proc = subprocess.run([str(VERLENV), "doctor", "--ray", "--only", "nope"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "unknown probe nope; valid: " in proc.stderr.strip().splitlines()[-1]


@pytest.mark.skipif(bool(__import__("verlenv.catalog.gpus", fromlist=["x"]).gpu_details()),
                    reason="needs a machine without GPU")
def test_node_check_without_gpu_runs_the_static_checks_even_for_a_named_profile():
    """What each Ray task runs, here in this interpreter: a GPU-less node (a CPU head) is not an error."""
    from verlenv.catalog import stacks
    from verlenv.cluster import node
    from verlenv.verify.options import VerifyOptions

    cat = stacks.load(ROOT / "stacks.toml")
    options = VerifyOptions(variant="fsdp", gpu="h100").for_node()
    out = node.check(node.Request(catalog=cat, options=options.to_json(), lock_name=None, lock_text=None))
    assert "error" not in out and out["profile"] is None, out.get("error")
    assert out["node"]["python"] == sys.executable and out["fingerprint"]["python:executable"] == sys.executable
    results = {r["name"]: r["status"] for r in out["results"]}
    assert results["lock/match"] == "skip" and results["torch/kernels"] == "skip"
    assert out["fingerprint"]["package:pytest"] == __import__("importlib.metadata").metadata.version("pytest")


def test_an_address_where_nothing_listens_is_one_line_and_exit_2():
    """The driver checks the address before ray.init, which would retry it for minutes."""
    import os

    python = Path(os.environ.get("VERLENV_CLUSTER_ENV") or ROOT / ".venv-verl-0.9-fsdp" / "bin" / "python")
    if not python.exists():
        pytest.skip(f"no default env at {python}: make it with `nox -s env` (or set VERLENV_CLUSTER_ENV)")
    from ray_nodes import free_port

    port = free_port()
    proc = subprocess.run([str(VERLENV), "verify", "--ray", f"127.0.0.1:{port}", "--python", str(python)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr[-1000:]
    assert f":{port} (Connection refused); is the Ray head running there" in proc.stderr.strip().splitlines()[-1]
