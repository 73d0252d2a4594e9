"""GPU profiles for `verlenv verify`: data, selection (a100/h100/h200/auto), loud mismatches, --force, bad input.

This machine has no GPU. Where a test needs one, `fake_nvidia_smi` puts a test double of nvidia-smi on
PATH that answers `--query-gpu` for a given GPU list; everything past it is the real code.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verlenv.catalog import gpus
from verlenv.cli import main
from verlenv.errors import UserError

REPO = Path(__file__).resolve().parent.parent
H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0", "memory.total": 81559, "driver_version": "580.95.05"}
H200 = {"name": "NVIDIA H200", "compute_cap": "9.0", "memory.total": 143771, "driver_version": "580.95.05"}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "compute_cap": "8.0", "memory.total": 81920, "driver_version": "580.95.05"}
RTX = {"name": "NVIDIA GeForce RTX 4090", "compute_cap": "8.9", "memory.total": 24564, "driver_version": "580.95.05"}


def fake_nvidia_smi(folder: Path, devices: list[dict]) -> Path:
    """Test double of nvidia-smi: prints the --query-gpu fields of `devices`, one CSV line each."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"DEVICES = {devices!r}\n"
        "query = [a.split('=', 1)[1] for a in sys.argv[1:] if a.startswith('--query-gpu=')]\n"
        "if not query:\n"
        "    sys.exit('test double answers --query-gpu only')\n"
        "for i, d in enumerate(DEVICES):\n"
        "    d = {'index': i, 'uuid': f'GPU-{i:08x}-1111-2222-3333-444455556666', **d}\n"
        "    print(', '.join(str(d[f]) for f in query[0].split(',')))\n"
    )
    script.chmod(0o755)
    return folder


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """Make this machine look like it has `devices` (through the nvidia-smi test double)."""
    monkeypatch.chdir(REPO)
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX", "VERLENV_ROOT", "TRITON_LIBCUDA_PATH"):
        monkeypatch.delenv(var, raising=False)

    def with_gpus(*devices: dict) -> None:
        folder = fake_nvidia_smi(tmp_path / "smi", list(devices))
        monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")

    return with_gpus


@pytest.fixture(scope="module")
def empty_env(tmp_path_factory) -> str:
    """A real, empty venv (of the interpreter running the tests: no download, no network)."""
    env = tmp_path_factory.mktemp("env") / "venv"
    subprocess.run(["uv", "venv", "-q", "--python", sys.executable, str(env)], check=True)
    return str(env / "bin" / "python")


def test_profiles_carry_arch_fp8_and_thresholds_from_data():
    p = gpus.profiles()
    assert set(p) == {"a100", "h100", "h200", "b200", "gb200", "b300", "rtx-pro-6000"}  # `defaults` is no profile
    assert {k: v.arch for k, v in p.items()} == {"a100": "8.0", "h100": "9.0", "h200": "9.0", "b200": "10.0",
                                                  "gb200": "10.0", "b300": "10.3", "rtx-pro-6000": "12.0"}
    assert [k for k, v in p.items() if not v.fp8] == ["a100"]
    for profile in p.values():
        t = profile.thresholds
        assert t["bf16_max_rel_err"] == 1e-2  # [defaults.thresholds]
        # Hopper's own floor overrides the default: the held-out expectation is FA >= torch's flash SDPA.
        assert t["flash_attn_min_ratio_vs_sdpa"] == (1.0 if profile.arch == "9.0" else 0.8)
        # The scripts take thresholds as plain numbers.
        assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in t.values())
        # Floors sit below what was measured on an H200 (356 TFLOP/s, 316 GB/s).
        assert 0 < t["flash_attn_min_tflops"] < 356
        assert all(0 < t[f"nccl_min_busbw_gbs_{n}gpu"] < 316 for n in (2, 4, 8))
    assert p["a100"].thresholds["flash_attn_min_tflops"] < p["h100"].thresholds["flash_attn_min_tflops"]
    sent = p["h100"].for_checks(gpu_count=2)
    assert json.loads(json.dumps(sent)) == sent
    assert sent["key"] == "h100" and sent["arch"] == "9.0" and sent["fp8"] is True and sent["gpu_count"] == 2


def test_build_archs_still_come_from_profiles():
    assert gpus.archs_for(["a100", "h200"]) == ["8.0", "9.0"]
    # A B300 runs sm_100 cubins (flash-attn 2.8.3 compiles no sm_103): its builds are the B200's.
    assert gpus.archs_for(["b200", "b300", "gb200"]) == ["10.0"]
    assert gpus.archs_for(["h100", "rtx-pro-6000", "b200"]) == ["9.0", "10.0", "12.0"]


def test_each_profile_row_is_a_verify_session_of_the_noxfile():
    """One nox session per row of data/gpus.toml, made by one helper (noxfile.py), never a copied function."""
    r = subprocess.run([sys.executable, "-m", "nox", "-f", str(REPO / "noxfile.py"), "-l"], capture_output=True,
                       text=True, check=True)
    listed = dict(line[2:].split(" -> ", 1) for line in r.stdout.splitlines() if line.startswith(("* ", "- ")))
    for key, p in gpus.profiles().items():
        sm = p.arch.replace(".", "")
        assert listed[f"verify-{key}"] == (f"Verify against the {p.title} profile (sm_{sm}); exit 2 on another GPU "
                                           "unless -- --force.")
    assert "verify-b300" in listed and "verify-rtx-pro-6000" in listed


def test_blackwell_rows_carry_driver_floors_and_machines():
    p = gpus.profiles()
    # CUDA 12.8 GA (>= 570.26) first compiles sm_100 and sm_120, CUDA 12.9 GA (>= 575.51.03) sm_103.
    assert {k: p[k].min_driver for k in ("b200", "gb200", "b300", "rtx-pro-6000")} == {
        "b200": "570.26", "gb200": "570.26", "b300": "575.51.03", "rtx-pro-6000": "570.26"}
    assert [k for k, v in p.items() if v.machine != "x86_64"] == ["gb200"]
    # Under CUDA 13.0 (verl-0.9: 580.65.06) the stack's floor is the higher; under CUDA 12.8 (verl-0.7) the B300's.
    assert p["b300"].driver_floor("580.65.06") == "580.65.06"
    assert p["b300"].driver_floor("570.124.06") == "575.51.03"
    assert p["h100"].driver_floor("580.65.06") == "580.65.06"
    assert p["gb200"].machine == "aarch64"


@pytest.mark.parametrize("name, key", [
    ("NVIDIA B200", "b200"), ("NVIDIA GB200", "gb200"), ("NVIDIA B300 SXM6 AC", "b300"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"), ("NVIDIA H200 NVL", "h200"),
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA GeForce RTX 5090", None),
])
def test_a_gpu_name_picks_the_profile_that_names_it_most_precisely(name, key):
    """"NVIDIA GB200" holds "B200" too: the longest match wins, whatever the rows' order."""
    found = gpus.profile_for_name(name)
    assert (found.key if found else None) == key


@pytest.mark.parametrize("cap, key", [("12.0", "rtx-pro-6000"), ("12.1", "rtx-pro-6000"), ("10.3", "b300"),
                                      ("8.9", "a100"), ("8.6", "a100"), ("9.0", "h100")])
def test_nearest_profile_is_one_whose_build_runs_there(cap, key):
    assert gpus.nearest_profile(cap).key == key


def test_cubin_names_for_a_device_follow_the_family_rules():
    assert gpus.cubin_names_for("10.0") == ["sm_100", "sm_100a", "sm_100f"]
    b300 = gpus.cubin_names_for("10.3")
    assert {"sm_100", "sm_100f", "sm_103", "sm_103a", "sm_103f"} <= set(b300) and "sm_100a" not in b300
    assert gpus.cubin_names_for("12.1") == ["sm_120", "sm_120f", "sm_121", "sm_121a", "sm_121f"]
    assert gpus.cubin_names_for("9.0") == ["sm_90", "sm_90a"]


def gpu(d: dict) -> gpus.Gpu:
    return gpus.Gpu(d["name"], d["compute_cap"], d["memory.total"], d["driver_version"])


@pytest.mark.parametrize("device, key", [(H100, "h100"), (H200, "h200"), (A100, "a100")])
def test_auto_picks_the_profile_of_the_visible_gpu(device, key):
    assert gpus.select_profile("auto", [gpu(device)] * 2).key == key


def test_auto_without_gpu_means_static_checks_only():
    assert gpus.select_profile("auto", []) is None


def test_a_profile_for_another_gpu_fails_loudly_unless_forced():
    with pytest.raises(UserError, match=r"--gpu a100: this machine has NVIDIA H100 80GB HBM3, not an NVIDIA A100.*"
                                        r"--gpu h100 or --gpu auto, or --force") as e:
        gpus.select_profile("a100", [gpu(H100)])
    assert e.value.exit_code == 2 and "\n" not in str(e.value)
    assert gpus.select_profile("a100", [gpu(H100)], force=True).key == "a100"
    with pytest.raises(UserError, match="no GPU is visible"):
        gpus.select_profile("h100", [])
    assert gpus.select_profile("h100", [], force=True).key == "h100"
    assert gpus.select_profile("h100", [gpu(H100)]).key == "h100"


def test_unknown_and_mixed_gpus_are_refused():
    with pytest.raises(UserError) as e:
        gpus.select_profile("auto", [gpu(RTX)])
    assert str(e.value) == ("no GPU profile for NVIDIA GeForce RTX 4090 (compute capability 8.9); nearest: a100 "
                            "(sm 8.0); check against it with --gpu a100 --force; valid: " + ", ".join(gpus.profiles()))
    with pytest.raises(UserError, match=r"5090 \(compute capability 12.0\); nearest: rtx-pro-6000 \(sm 12.0\)"):
        gpus.select_profile("auto", [gpu({**RTX, "name": "NVIDIA GeForce RTX 5090", "compute_cap": "12.0"})])
    with pytest.raises(UserError, match="different kinds"):
        gpus.select_profile("auto", [gpu(H100), gpu(A100)])
    with pytest.raises(UserError, match="unknown GPU 'v100'; valid: a100, h100, h200, b200"):
        gpus.select_profile("v100", [gpu(H100)])


def test_gpu_details_reads_nvidia_smi(machine, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    machine(H100, H100)
    found = gpus.gpu_details()
    assert found == [gpus.Gpu("NVIDIA H100 80GB HBM3", "9.0", 81559, "580.95.05")] * 2
    assert gpus.visible_gpus() == [("NVIDIA H100 80GB HBM3", "9.0")] * 2


@pytest.mark.parametrize("visible, expected", [
    ("1", ["NVIDIA H200"]), ("1,0", ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]), ("", []),
    ("GPU-00000001", ["NVIDIA H200"]), ("0,7,1", ["NVIDIA H100 80GB HBM3"]), ("0,0", ["NVIDIA H100 80GB HBM3"]),
])
def test_gpu_details_see_only_the_gpus_cuda_visible_devices_gives(machine, monkeypatch, visible, expected):
    """One Ray node per GPU, Slurm's binding: nvidia-smi lists the host's GPUs, CUDA (and verify) only these."""
    machine(H100, H200)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert [g.name for g in gpus.gpu_details()] == expected
    assert [name for name, _ in gpus.visible_gpus()] == expected


def one_line_exit_2(capsys, argv: list[str], expected: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("verlenv verify: ") and expected in err[0], err[0]


def test_verify_a100_on_an_h100_exits_2_with_one_line(machine, capsys, empty_env, tmp_path):
    machine(H100)
    one_line_exit_2(capsys, ["verify", "--gpu", "a100", "--python", empty_env, "--report", str(tmp_path / "r.json")],
                    "this machine has NVIDIA H100 80GB HBM3, not an NVIDIA A100")
    assert not (tmp_path / "r.json").exists()  # refused before anything ran


def test_bad_input_is_one_line_and_exit_2(machine, capsys, empty_env, tmp_path):
    machine()
    one_line_exit_2(capsys, ["verify", "--gpu", "v100"], "unknown GPU 'v100'; valid: a100, h100, h200, b200, gb200")
    one_line_exit_2(capsys, ["verify", "--stack", "verl-0.1", "--python", empty_env],
                    "unknown stack 'verl-0.1'; valid: ")
    one_line_exit_2(capsys, ["verify", "--variant", "deepspeed", "--python", empty_env],
                    "unknown variant 'deepspeed' of stack verl-0.9; valid: fsdp, megatron")
    one_line_exit_2(capsys, ["verify", "--python", str(tmp_path / "nope" / "python")], "no such file")
    one_line_exit_2(capsys, ["verify", "--python", shutil.which("true")], "not a Python 3 interpreter")
    one_line_exit_2(capsys, ["verify", "--python", str(tmp_path)], "not an executable interpreter")
    one_line_exit_2(capsys, ["verify", "--python", empty_env, "--skip-package", "numpyy"],
                    "--skip-package numpyy: unknown package; valid: ")
    one_line_exit_2(capsys, ["verify", "--python", empty_env, "--lock", str(tmp_path / "missing.txt")], "no such file")
    one_line_exit_2(capsys, ["verify", "--gpu", "h100", "--python", empty_env], "no GPU is visible on this machine")


def test_verify_on_an_unknown_gpu_names_its_arch_and_the_nearest_profile(machine, capsys, empty_env):
    machine({**RTX, "name": "NVIDIA GeForce RTX 5090", "compute_cap": "12.0"})
    one_line_exit_2(capsys, ["verify", "--python", empty_env],
                    "no GPU profile for NVIDIA GeForce RTX 5090 (compute capability 12.0); nearest: rtx-pro-6000 "
                    "(sm 12.0); check against it with --gpu rtx-pro-6000 --force")


def kernels_echoing_profile(folder: Path) -> Path:
    """A kernels dir whose one script (a test double named check_torch.py) reports the profile it was given."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "check_torch.py").write_text(
        "import argparse, json\n"
        "p = argparse.ArgumentParser(); p.add_argument('--out'); p.add_argument('--profile')\n"
        "a = p.parse_args(); prof = json.loads(a.profile)\n"
        "json.dump([{'check': 'torch/profile-echo', 'package': 'torch', 'status': 'pass', 'reason': 'echo',\n"
        "            'numbers': {'key': prof['key'], 'arch': prof['arch'], 'fp8': prof['fp8'], "
        "'gpus': prof['gpu_count'],\n"
        "                        'floor': prof['thresholds']['flash_attn_min_tflops']}, 'seconds': 0.0}],\n"
        "          open(a.out, 'w'))\n")
    return folder


@pytest.mark.parametrize("devices, requested, force, expected", [
    ([H200, H200], "auto", False, {"key": "h200", "arch": "9.0", "fp8": True, "gpus": 2, "floor": 250}),
    ([H100], "h100", False, {"key": "h100", "arch": "9.0", "fp8": True, "gpus": 1, "floor": 190}),
    ([H100], "a100", True, {"key": "a100", "arch": "8.0", "fp8": False, "gpus": 1, "floor": 80}),
])
def test_kernel_scripts_receive_the_selected_profile(machine, capsys, empty_env, tmp_path, devices, requested, force,
                                                     expected):
    machine(*devices)
    report = tmp_path / "r.json"
    argv = ["verify", "--gpu", requested, "--python", empty_env, "--no-lock", "--only", "torch",
            "--kernels-dir", str(kernels_echoing_profile(tmp_path / "kernels")), "--report", str(report)]
    main(argv + ["--force"] * force)
    data = json.loads(report.read_text())
    echo = next(c for c in data["checks"] if c["name"] == "torch/profile-echo")
    assert echo["numbers"] == expected
    assert data["profile"]["key"] == expected["key"] and data["profile"]["forced"] is force
    assert [g["name"] for g in data["gpus"]] == [d["name"] for d in devices]


def test_default_env_is_the_active_one_unless_it_is_verlenvs_own(tmp_path, monkeypatch):
    from verlenv.catalog import stacks
    from verlenv.env.install import default_python

    variant = stacks.load(REPO / "stacks.toml").variant(None, "fsdp")
    root = tmp_path / "checkout"
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(UserError,
                       match=r"no env to verify: activate one, pass --python, or create .*\.venv-verl-0\.9-fsdp"):
        default_python(variant, root, "verify")
    monkeypatch.setenv("VIRTUAL_ENV", sys.prefix)  # verlenv's own env, e.g. a nox session's
    assert default_python(variant, root, "verify") == f"{sys.prefix}/bin/python"  # nothing better exists
    (root / ".venv-verl-0.9-fsdp" / "bin").mkdir(parents=True)
    (root / ".venv-verl-0.9-fsdp" / "bin" / "python").touch()
    assert default_python(variant, root, "verify") == str(root / ".venv-verl-0.9-fsdp" / "bin" / "python")
    monkeypatch.setenv("CONDA_PREFIX", str(tmp_path / "conda-env"))  # an activated env of the user's
    assert default_python(variant, root, "verify") == str(tmp_path / "conda-env" / "bin" / "python")
