"""GPU checks of flash-attn: fwd+bwd (bf16/fp16, causal or not, and varlen) against attention computed in
float64, and forward throughput against torch's own flash SDPA backend on the same shape: the two timed in turn,
each judged by its best call, so a load sharing the GPU (verl's trainer beside it, in the fast proof) slows both
alike and the best calls still show each kernel's own speed; a round that misses a floor is measured again.

Thresholds: bf16_max_rel_err, fp16_max_rel_err, flash_attn_min_ratio_vs_sdpa, flash_attn_min_tflops.
Run: python check_flash_attn.py --out results.json --profile '{"key": "h100", "arch": "9.0", "fp8": true}'
"""

import itertools
import sys

import _common

PACKAGE = "flash-attn"
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
# Throughput shape (batch, seqlen, heads, head_dim), bf16 causal: big enough to fill an A100/H100.
PERF_SHAPE = (4, 4096, 32, 128)
# Calls of each kernel per round (alternating), and rounds at most: a round whose best calls miss a floor is
# followed by another, the best of all rounds judged.
PERF_CALLS, PERF_ROUNDS = 20, 3


def reference(torch, q, k, v, dout, causal):
    """Output and dq, dk, dv in float64 through torch's math SDPA; all tensors are (batch, seqlen, heads, dim)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q64, k64, v64 = (t.detach().double().transpose(1, 2).requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        out = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=causal)
    out.backward(dout.detach().double().transpose(1, 2))
    return [t.transpose(1, 2) for t in (out, q64.grad, k64.grad, v64.grad)]


def random_inputs(torch, shape, dtype, seed, device):
    gen = torch.Generator(device=device).manual_seed(seed)
    q, k, v, dout = (torch.randn(shape, device=device, dtype=dtype, generator=gen) for _ in range(4))
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), dout


def judge(profile, dtype_name, got, want, note):
    numbers, problems = {}, []
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        _common.compare(numbers, problems, name, g, w, profile.max_rel_err(dtype_name))
    return _common.verdict(numbers, problems, note)


def check_import():
    import flash_attn
    import flash_attn_2_cuda  # noqa: F401  the compiled kernels: an ABI mismatch with torch fails here

    return {}, f"flash-attn {flash_attn.__version__} from {flash_attn.__file__}"


def check_fwd_bwd(torch, profile, dtype_name, causal, seed, shape=(2, 1024, 8, 128), device="cuda"):
    from flash_attn import flash_attn_func

    q, k, v, dout = random_inputs(torch, shape, getattr(torch, DTYPES[dtype_name]), seed, device)
    out = flash_attn_func(q, k, v, causal=causal)
    out.backward(dout)
    want = reference(torch, q, k, v, dout, causal)
    batch, seqlen, heads, dim = shape
    return judge(profile, dtype_name, (out, q.grad, k.grad, v.grad), want,
                 f"batch {batch}, seqlen {seqlen}, heads {heads}, head_dim {dim}")


def check_varlen(torch, profile, seed, lengths=(128, 700, 1000, 333), heads=8, dim=64, device="cuda"):
    """Sequences of uneven lengths packed into one tensor, delimited by cu_seqlens (as verl's remove-padding runs)."""
    from flash_attn import flash_attn_varlen_func

    total = sum(lengths)
    q, k, v, dout = random_inputs(torch, (total, heads, dim), torch.bfloat16, seed, device)
    cu_seqlens = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)
    out = flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max(lengths), max(lengths), causal=True)
    out.backward(dout)
    pieces = []
    for start, end in zip(cu_seqlens.tolist(), cu_seqlens.tolist()[1:]):
        one = (t[start:end].unsqueeze(0) for t in (q, k, v, dout))
        pieces.append([t.squeeze(0) for t in reference(torch, *one, causal=True)])
    want = [torch.cat(parts) for parts in zip(*pieces)]
    return judge(profile, "bf16", (out, q.grad, k.grad, v.grad), want,
                 f"lengths {list(lengths)}, heads {heads}, head_dim {dim}")


def interleaved_ms(torch, kernels: dict, calls: int, warmup: int = 5) -> dict[str, list[float]]:
    """Per-call device time (ms, CUDA events) of each kernel, called in turn (the order flipping every call), so
    that whatever else runs on the GPU meanwhile lands on both alike."""
    for fn in kernels.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    names, times = list(kernels), {name: [] for name in kernels}
    for i in range(calls):
        for name in (names if i % 2 == 0 else names[::-1]):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            kernels[name]()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end))
    return times


def throughput_problems(fa_tflops: float, ratio: float, sdpa_tflops: float, profile) -> list[str]:
    problems = []
    min_tflops = profile.threshold("flash_attn_min_tflops")
    min_ratio = profile.threshold("flash_attn_min_ratio_vs_sdpa")
    if not _common.at_least(fa_tflops, min_tflops):
        problems.append(f"{fa_tflops:.0f} TFLOP/s is below the floor of {min_tflops:.0f}")
    if not _common.at_least(ratio, min_ratio):
        problems.append(f"{ratio:.2f}x torch's flash SDPA ({sdpa_tflops:.0f} TFLOP/s) is below {min_ratio:.2f}x: "
                        "suspect a build for the wrong arch (PTX JIT) or with debug flags")
    return problems


def best_of_rounds(measure, flops: float, profile, rounds: int = PERF_ROUNDS) -> dict:
    """Rounds of measure() ({"fa": [ms], "sdpa": [ms]}) until the best calls so far meet both floors, or rounds
    run out: the times of all rounds, the TFLOP/s of each kernel's best call, their ratio, what misses a floor."""
    times = {"fa": [], "sdpa": []}
    for done in range(1, rounds + 1):
        for name, ms in measure().items():
            times[name] += ms
        fa_tflops, sdpa_tflops = _common.tflops(flops, min(times["fa"])), _common.tflops(flops, min(times["sdpa"]))
        problems = throughput_problems(fa_tflops, fa_tflops / sdpa_tflops, sdpa_tflops, profile)
        if not problems:
            break
    return {"times": times, "tflops": fa_tflops, "sdpa_tflops": sdpa_tflops, "ratio": fa_tflops / sdpa_tflops,
            "problems": problems, "rounds": done}


def check_throughput(torch, profile, seed):
    from flash_attn import flash_attn_func
    from torch.nn.attention import SDPBackend, sdpa_kernel

    batch, seqlen, heads, dim = PERF_SHAPE
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(PERF_SHAPE, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))  # SDPA wants (batch, heads, seqlen, dim)

    def sdpa():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True)

    kernels = {"fa": lambda: flash_attn_func(q, k, v, causal=True), "sdpa": sdpa}
    flops = _common.attention_flops(batch, seqlen, heads, dim, causal=True)
    with torch.no_grad():
        best = best_of_rounds(lambda: interleaved_ms(torch, kernels, PERF_CALLS), flops, profile)
    fa, sd = _common.timing_stats(best["times"]["fa"]), _common.timing_stats(best["times"]["sdpa"])
    numbers = {"tflops": best["tflops"], "sdpa_flash_tflops": best["sdpa_tflops"], "ratio_vs_sdpa": best["ratio"],
               "median_tflops": _common.tflops(flops, fa["median_ms"]),
               "median_ratio_vs_sdpa": sd["median_ms"] / fa["median_ms"],
               "median_ms": fa["median_ms"], "min_ms": fa["min_ms"], "max_ms": fa["max_ms"],
               "sdpa_median_ms": sd["median_ms"], "sdpa_min_ms": sd["min_ms"], "repeats": fa["repeats"],
               "rounds": best["rounds"]}
    beside = f"; ran beside {', '.join(profile.beside)}" if profile.beside else ""
    note = (f"forward bf16 causal, batch {batch}, seqlen {seqlen}, heads {heads}, head_dim {dim}: "
            f"{best['tflops']:.0f} TFLOP/s, {best['ratio']:.2f}x torch flash SDPA (best of {fa['repeats']} calls "
            f"each, in turn){beside}")
    return _common.verdict(numbers, best["problems"], note)


def checks(profile, torch):
    cases = [(d, c) for d in DTYPES for c in (True, False)]
    return [
        ("flash-attn/import", check_import),
        *[(f"flash-attn/fwd+bwd/{d}/{'causal' if c else 'noncausal'}",
           lambda d=d, c=c, i=i: check_fwd_bwd(torch, profile, d, c, seed=i)) for i, (d, c) in enumerate(cases)],
        ("flash-attn/varlen/fwd+bwd/bf16/causal", lambda: check_varlen(torch, profile, seed=10)),
        ("flash-attn/throughput/fwd/bf16/causal", lambda: check_throughput(torch, profile, seed=11)),
    ]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"flash_attn": "flash-attn", "torch": "torch"}, checks))
