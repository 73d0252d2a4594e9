"""What the upstream binaries of the default stack carry (data/gpu_code.toml's [[shipped]] rows) and, by its [runs_on]
rules, which GPU profile each runs on: the per-package, per-profile verdicts, and the rows read again from the real
objects where the default env is present (no GPU needed: the fatbin headers say it)."""

import collections
import sys
from pathlib import Path

import pytest

from verlenv import cubins
from verlenv.catalog import gpus

ROWS = cubins.shipped()


def row(package: str, object_: str) -> dict:
    return next(r for r in ROWS if r["package"] == package and r["object"] == object_)


def cubins_running_on(r: dict, profile: str) -> list[str]:
    entries = [cubins.parse_code(name) for name in r["code"] if name.startswith("sm_")]
    return cubins.code_that_runs(entries, gpus.profile(profile).arch)


def test_rows_name_real_code_and_counts():
    assert {r["package"] for r in ROWS} == {"torch", "vllm", "flashinfer-cubin", "transformer-engine-cu13"}
    for r in ROWS:
        assert all(cubins.parse_code(name).name == name for name in r["code"]), r["object"]
        assert all(isinstance(n, int) and n > 0 for n in r["code"].values()), r["object"]


# Per object and profile, the cubins that run there ([]: none; the GPU falls back to PTX or has no kernel image).
VERDICTS = {
    ("torch", "torch/lib/libtorch_cuda.so"): {
        "a100": ["sm_80"], "h100": ["sm_90", "sm_90a"], "b200": ["sm_100", "sm_100a"], "gb200": ["sm_100", "sm_100a"],
        # sm_100 runs on 10.3 (a cubin runs on later minors of its major); torch also built a few kernels for sm_103a.
        "b300": ["sm_100", "sm_103a"], "rtx-pro-6000": ["sm_120", "sm_120a"]},
    ("vllm", "vllm/_C_stable_libtorch.abi3.so"): {
        "b200": ["sm_100", "sm_100f"], "b300": ["sm_100", "sm_100f"], "rtx-pro-6000": ["sm_120", "sm_120f"]},
    ("vllm", "vllm/_flashmla_C.abi3.so"): {
        "a100": [], "h100": ["sm_90a"], "b200": ["sm_100f"], "b300": ["sm_100f"], "rtx-pro-6000": []},
    ("flashinfer-cubin", "flashinfer_cubin/cubins/**/*.cubin"): {
        "h100": [], "b200": ["sm_100a", "sm_100f"], "b300": ["sm_100f", "sm_103a"], "rtx-pro-6000": []},
    ("transformer-engine-cu13", "transformer_engine/wheel_lib/libtransformer_engine.so"): {
        "a100": ["sm_80"], "b200": ["sm_100", "sm_100a"], "b300": ["sm_100", "sm_103a"],
        "rtx-pro-6000": ["sm_120", "sm_120f"]},
}


@pytest.mark.parametrize("key", VERDICTS, ids=lambda k: k[1])
def test_which_upstream_cubins_run_on_each_profile(key):
    r = row(*key)
    assert {p: cubins_running_on(r, p) for p in VERDICTS[key]} == VERDICTS[key]


def test_every_blackwell_profile_has_torch_vllm_and_te_code_without_jit():
    for profile in ("b200", "gb200", "b300", "rtx-pro-6000"):
        for key in [k for k in VERDICTS if k[0] != "flashinfer-cubin" and "flashmla" not in k[1]]:
            assert cubins_running_on(row(*key), profile), (key, profile)


def env_site_packages() -> Path:
    from conftest import default_env_python

    python = default_env_python()
    if not python.exists():
        pytest.skip(f"no default env at {python}: make it with `nox -s env` (or set VERLENV_CLUSTER_ENV)")
    found = sorted(python.parent.parent.glob("lib/python3.*/site-packages"))  # the venv's, not its base's
    if not found:
        pytest.skip(f"{python} has no site-packages")
    return found[0]


@pytest.mark.parametrize("key", [("torch", "torch/lib/libtorch_cuda.so"), ("vllm", "vllm/_C_stable_libtorch.abi3.so"),
                                 ("vllm", "vllm/_flashmla_C.abi3.so")], ids=lambda k: k[1])
def test_rows_are_what_the_installed_objects_carry(key):
    site = env_site_packages()
    r = row(*key)
    so = site / r["object"]
    if not so.is_file():
        pytest.skip(f"{so} is not installed")
    read = collections.Counter(e.name for e in cubins.shared_object_archs(so))
    assert dict(read) == r["code"]
    print(f"{r['object']}: {dict(sorted(read.items()))}", file=sys.stderr)
