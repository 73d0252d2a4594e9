"""GPU checks of Triton: JIT-compile a vector add (checked bit-exactly) and a row softmax (against float64) and
run them. Compiling links Triton's launcher against the driver's libcuda; a failure there is the known
`cannot find -lcuda` case, and the reason says so.

Thresholds: fp32_max_rel_err.
Run: python check_triton.py --out results.json --profile '{"key": "h100", "arch": "9.0", "fp8": true}'
"""

import subprocess
import sys

import _common

PACKAGE = "triton"
LIBCUDA_HINT = ("Triton could not link against the driver's libcuda (the known `cannot find -lcuda` problem): "
                "set TRITON_LIBCUDA_PATH to the directory holding the driver's libcuda.so.1, or run ldconfig")

# Bound by compile_kernels(): a kernel resolves names such as `tl` through its module's globals.
triton = tl = None


def compile_kernels():
    global triton, tl
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
                 mask=mask)

    @triton.jit
    def softmax_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offsets = tl.arange(0, BLOCK)
        mask = offsets < cols
        x = tl.load(x_ptr + row * cols + offsets, mask=mask, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * cols + offsets, e / tl.sum(e, axis=0), mask=mask)

    return add_kernel, softmax_kernel


def libcuda_failure(exc: BaseException) -> bool:
    """Whether exc is Triton failing to find or link libcuda (its C compiler call or its ldconfig lookup)."""
    text = str(exc)
    if isinstance(exc, subprocess.CalledProcessError):
        text += " " + " ".join(map(str, exc.cmd if isinstance(exc.cmd, (list, tuple)) else [exc.cmd]))
    return "lcuda" in text or "libcuda" in text


def with_libcuda_hint(fn):
    try:
        return fn()
    except Exception as e:
        if libcuda_failure(e):
            raise _common.Failed(f"{LIBCUDA_HINT}. {_common.describe(e)}") from e
        raise


def check_import():
    import triton

    return {}, f"triton {triton.__version__}"


def check_vector_add(torch, device="cuda", n=(1 << 20) + 17):
    add_kernel, _ = compile_kernels()
    gen = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(n, device=device, generator=gen)
    y = torch.randn(n, device=device, generator=gen)
    out = torch.full_like(x, float("nan"))
    block = 1024
    with_libcuda_hint(lambda: add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block))
    wrong = int((out != x + y).sum().item())
    numbers = {"elements": n, "wrong_elements": wrong}
    return _common.verdict(numbers, [f"{wrong} of {n} sums differ from torch"] if wrong else [],
                           f"{n} fp32 elements, bit-exact")


def check_softmax(torch, profile, device="cuda", rows=1024, cols=781):
    _, softmax_kernel = compile_kernels()
    gen = torch.Generator(device=device).manual_seed(2)
    x = torch.randn(rows, cols, device=device, generator=gen)
    out = torch.full_like(x, float("nan"))
    with_libcuda_hint(lambda: softmax_kernel[(rows,)](x, out, cols, BLOCK=triton.next_power_of_2(cols)))
    numbers, problems = {}, []
    _common.compare(numbers, problems, "out", out, torch.softmax(x.double(), dim=-1), profile.max_rel_err("fp32"))
    return _common.verdict(numbers, problems, f"{rows}x{cols} fp32")


def checks(profile, torch):
    return [
        ("triton/import", check_import),
        ("triton/vector-add/fp32", lambda: check_vector_add(torch)),
        ("triton/softmax/fp32", lambda: check_softmax(torch, profile)),
    ]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"triton": "triton", "torch": "torch"}, checks))
