"""Does a FlashInfer GDN prefill module compiled ahead of time (on a CPU machine: nvcc needs no GPU) load, and does it
compute what the gated delta rule computes?

vLLM 0.24.0 prefills the gated-DeltaNet layers of Qwen3.5 and Qwen3-Next with FlashInfer's GDN kernel on sm_90 and
JIT-compiles it at the first step: 510 s on a 16-core H100 host (visit R), 54 min at 2 jobs on this project's CPU
machine. FlashInfer loads a prebuilt module instead when a `flashinfer_jit_cache` package holds `<name>/<name>.so` in
its folder (flashinfer/jit/core.py: aot_path, checked before any compile). Given --jit-cache DIR, the folder that holds
such a package, this reports whether the module came from it, how long loading it took, and the kernel's relative error
against verify's float64 recurrence (kernels/check_gated_delta_rule.py: reference) on packed sequences of uneven
lengths, as vLLM passes them (cu_seqlens, q and k l2-normalised before the call, the decay as exp(g)).

Run in the env on an H100 or H200: python benchmarks/flashinfer_gdn_aot.py --jit-cache DIR --out result.json
"""

import argparse
import json
import sys
import time
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[1] / "src" / "verlenv" / "verify" / "kernels"
# Qwen3-Next's DeltaNet heads are 128 wide; the lengths leave partial chunks of the kernel's 64.
HEADS, DIM = 4, 128
LENGTHS = (63, 200, 129)
# check_gated_delta_rule.LIMITS["out"] and ["ht"]: a bf16 kernel against float64 from the same bf16 inputs.
LIMIT = 0.02


def rel_err(got, want) -> float:
    return ((got.double() - want).norm() / want.norm()).item()


def packed_inputs(torch, rule, device: str, seed: int = 0) -> dict:
    """One packed batch of LENGTHS: bf16 q, k (l2-normalised, as vLLM does before the call), v; float32 log-decay g
    and beta, as check_gated_delta_rule draws them."""
    q, k, v, g, beta = (t.detach() for t in rule.random_inputs(torch, (1, sum(LENGTHS), HEADS, DIM), seed, device))
    q, k = (rule.l2norm(torch, t.float()).to(torch.bfloat16) for t in (q, k))
    bounds = [0]
    for n in LENGTHS:
        bounds.append(bounds[-1] + n)
    return {"q": q[0], "k": k[0], "v": v[0], "g": g[0], "beta": beta[0].float(), "bounds": bounds}


def compare(torch, rule, inputs: dict, out, state) -> dict:
    """The kernel's output [tokens, heads, dim] and final states [seqs, heads, V, K] (FlashInfer's layout) against
    the float64 recurrence run on each sequence alone."""
    outs, states = [], []
    b = inputs["bounds"]
    for start, end in zip(b, b[1:]):
        q, k, v, g, beta = (inputs[n][None, start:end].double() for n in ("q", "k", "v", "g", "beta"))
        o, s = rule.reference(torch, q, k, v, g, beta, qk_l2norm=False)
        outs.append(o[0])
        states.append(s[0])
    want_out, want_state = torch.cat(outs), torch.stack(states)
    errors = {"out": rel_err(out, want_out), "state": rel_err(state.transpose(-1, -2), want_state)}
    return {"rel_err": errors, "limit": LIMIT, "passed": all(e <= LIMIT for e in errors.values())}


def run_kernel(torch, inputs: dict):
    from flashinfer.gdn_prefill import chunk_gated_delta_rule

    cu = torch.tensor(inputs["bounds"], dtype=torch.int64, device=inputs["q"].device)
    out, state = chunk_gated_delta_rule(q=inputs["q"], k=inputs["k"], v=inputs["v"], g=inputs["g"].exp(),
                                        beta=inputs["beta"], output_final_state=True, cu_seqlens=cu)
    torch.cuda.synchronize()
    return out, state


def measure(torch, rule, jit_cache: Path | None) -> dict:
    import flashinfer
    from flashinfer.gdn_prefill import get_gdn_prefill_module
    from flashinfer.jit.gdn import gen_gdn_prefill_sm90_module

    spec = gen_gdn_prefill_sm90_module()
    found = {"gpu": torch.cuda.get_device_name(), "flashinfer": flashinfer.__version__,
             "jit_cache": str(jit_cache) if jit_cache else None, "prebuilt": spec.is_aot,
             "module": str(spec.get_library_path())}
    if jit_cache and not spec.is_aot:  # never a compile of minutes in place of the answer asked for
        return {**found, "passed": False, "problem": f"{spec.aot_path} is not there: FlashInfer would compile it"}
    started = time.perf_counter()
    get_gdn_prefill_module()  # loads the prebuilt module, or compiles it first
    load_s = time.perf_counter() - started
    inputs = packed_inputs(torch, rule, "cuda")
    out, state = run_kernel(torch, inputs)
    return {**found, "load_s": round(load_s, 2), "lengths": list(LENGTHS), "heads": HEADS, "dim": DIM,
            **compare(torch, rule, inputs, out, state)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jit-cache", type=Path, help="the folder holding a flashinfer_jit_cache package (a module it "
                   "lacks is reported, not compiled); without it FlashInfer loads or compiles as it does in a run")
    p.add_argument("--out", type=Path, help="write the result here as JSON")
    args = p.parse_args(argv)
    if args.jit_cache and not (args.jit_cache / "flashinfer_jit_cache" / "__init__.py").is_file():
        print(f"--jit-cache {args.jit_cache}: holds no flashinfer_jit_cache package "
              "(flashinfer_jit_cache/__init__.py); give the folder above it", file=sys.stderr)
        return 2
    if args.jit_cache:
        sys.path.insert(0, str(args.jit_cache.resolve()))
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("flashinfer_gdn_aot: needs an sm_90 GPU (H100, H200): the module is FlashInfer's GDN prefill for "
              "sm_90a", file=sys.stderr)
        return 2
    sys.path.insert(0, str(KERNELS))
    import check_gated_delta_rule as rule

    result = measure(torch, rule, args.jit_cache)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
