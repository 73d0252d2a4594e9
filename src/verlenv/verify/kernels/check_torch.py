"""GPU checks of torch: the device, its arch against the profile's, a bf16 matmul, cuDNN and NCCL.

Thresholds: bf16_max_rel_err, fp16_max_rel_err.
Run: python check_torch.py --out results.json --profile '{"key": "h100", "arch": "9.0", "fp8": true}'
"""

import sys

import _common

PACKAGE = "torch"


def check_device(torch):
    count = torch.cuda.device_count()
    name = torch.cuda.get_device_name(0)
    capability = _common.arch_of(torch.cuda.get_device_capability(0))
    memory_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    note = (f"{count} x {name}, compute capability {capability}; torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}")
    return {"devices": count, "memory_gib": round(memory_gib, 1)}, note


def check_arch(torch, profile):
    problems = []
    for index in range(torch.cuda.device_count()):
        found = _common.arch_of(torch.cuda.get_device_capability(index))
        if found != profile.arch:
            problems.append(f"device {index} ({torch.cuda.get_device_name(index)}) is compute capability {found} "
                            f"but profile {profile.key!r} expects {profile.arch}: wrong GPU profile for this machine")
    wanted = "sm_" + profile.arch.replace(".", "")
    arch_list = torch.cuda.get_arch_list()
    # Code of the arch's family counts: torch 2.11's sm_100 cubins run on a B300 (sm_103), sm_120's on sm_121.
    runs = [a for a in arch_list if a in profile.runs_cubins]
    if not runs:
        problems.append(f"torch {torch.__version__} has no kernels that run on {wanted} (built for "
                        f"{' '.join(arch_list)})")
    for problem in problems:
        print(f"ERROR: {problem}", file=sys.stderr, flush=True)
    return _common.verdict({"devices": torch.cuda.device_count()}, problems,
                           f"{' '.join(runs) or 'nothing'} of {' '.join(arch_list)} runs on {wanted}")


def check_matmul(torch, profile, n=4096):
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    out = torch.full((n, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    torch.matmul(a, b, out=out)
    ref = a.double() @ b.double()
    numbers, problems = {}, []
    _common.compare(numbers, problems, "out", out, ref, profile.max_rel_err("bf16"))
    stats = _common.timing_stats(_common.cuda_times_ms(torch, lambda: torch.matmul(a, b, out=out), 3, 10))
    numbers.update(stats, tflops=_common.tflops(_common.matmul_flops(n, n, n), stats["median_ms"]))
    return _common.verdict(numbers, problems, f"{n}x{n}x{n}")


def check_cudnn(torch, profile):
    if not torch.backends.cudnn.is_available():
        raise _common.Failed("torch reports cuDNN unavailable")
    version = torch.backends.cudnn.version()
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(8, 64, 32, 32, device="cuda", dtype=torch.float16, generator=gen)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16, generator=gen) / 24
    with torch.backends.cudnn.flags(enabled=True):
        out = torch.nn.functional.conv2d(x, w, padding=1)
    ref = torch.nn.functional.conv2d(x.double().cpu(), w.double().cpu(), padding=1)
    numbers, problems = {"cudnn_version": version}, []
    _common.compare(numbers, problems, "out", out.cpu(), ref, profile.max_rel_err("fp16"))
    # cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 encoded major*1000 + minor*100 + patch.
    major = version // 10000 if version >= 90000 else version // 1000
    minor, patch = version // 100 % (100 if version >= 90000 else 10), version % 100
    return _common.verdict(numbers, problems, f"cuDNN {major}.{minor}.{patch}")


def check_nccl(torch):
    import torch.distributed

    if not torch.distributed.is_available() or not torch.distributed.is_nccl_available():
        raise _common.Failed("torch.distributed has no NCCL backend")
    version = torch.cuda.nccl.version()
    text = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    return {}, f"NCCL {text} (all-reduce is checked by nccl.py)"


def checks(profile, torch):
    return [
        ("torch/device", lambda: check_device(torch)),
        ("torch/arch", lambda: check_arch(torch, profile)),
        ("torch/matmul/bf16", lambda: check_matmul(torch, profile)),
        ("torch/cudnn/conv2d/fp16", lambda: check_cudnn(torch, profile)),
        ("torch/nccl/version", lambda: check_nccl(torch)),
    ]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"torch": "torch"}, checks))
