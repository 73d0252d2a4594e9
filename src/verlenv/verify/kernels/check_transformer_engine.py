"""GPU checks of Transformer Engine: its handwritten LayerNorm and RMSNorm kernels (a GEMM-only smoke test
passes on a build that lacks this GPU's arch), a bf16 Linear, and an fp8 Linear under delayed scaling where
the GPU profile allows fp8. All fwd+bwd against float64 torch.

Thresholds: bf16_max_rel_err, fp8_max_rel_err.
Run: python check_transformer_engine.py --out results.json --profile '{"key": "h100", "arch": "9.0", "fp8": true}'
"""

import sys

import _common

PACKAGE = "transformer-engine"


def check_import():
    import transformer_engine
    import transformer_engine.pytorch  # noqa: F401  loads the framework extension built against this torch

    return {}, f"transformer-engine {transformer_engine.__version__}"


def check_layer_norm(torch, profile, seed, rows=4096, hidden=2048, device="cuda"):
    import transformer_engine.pytorch as te

    x, dy, weight, bias = _common.norm_case(torch, seed, rows, hidden, device)
    module = te.LayerNorm(hidden, eps=1e-5, params_dtype=torch.bfloat16, device=device)
    return _common.judge_norm(torch, profile, module, x, dy, weight, bias)

def check_rms_norm(torch, profile, seed, rows=4096, hidden=2048, device="cuda"):
    import transformer_engine.pytorch as te

    x, dy, weight, _ = _common.norm_case(torch, seed, rows, hidden, device)
    module = te.RMSNorm(hidden, eps=1e-5, params_dtype=torch.bfloat16, device=device)
    return _common.judge_norm(torch, profile, module, x, dy, weight)

def linear_case(torch, seed, device, tokens=512, in_features=1024, out_features=2048):
    """A te.Linear with known weights, an input and an output gradient; sizes are multiples of 16 for fp8."""
    import transformer_engine.pytorch as te

    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(tokens, in_features, device=device, dtype=torch.bfloat16, generator=gen).requires_grad_()
    dy = torch.randn(tokens, out_features, device=device, dtype=torch.bfloat16, generator=gen)
    module = te.Linear(in_features, out_features, bias=True, params_dtype=torch.bfloat16, device=device)
    with torch.no_grad():
        module.weight.copy_(torch.randn(out_features, in_features, device=device, generator=gen) / in_features**0.5)
        module.bias.copy_(0.1 * torch.randn(out_features, device=device, generator=gen))
    return x, dy, module


def linear_reference(torch, x, dy, module):
    x64, w64, b64 = _common.leaves64(x, module.weight, module.bias)
    out = x64 @ w64.T + b64
    out.backward(dy.double())
    return out, x64.grad, w64.grad, b64.grad


def run_linear(x, dy, module):
    x.grad = None
    module.zero_grad(set_to_none=True)
    out = module(x)
    out.backward(dy)
    return out


def check_linear(torch, profile, seed, device="cuda"):
    x, dy, module = linear_case(torch, seed, device)
    out = run_linear(x, dy, module)
    ref, dx, dw, db = linear_reference(torch, x, dy, module)
    return _common.judge(profile, "bf16", [("out", out, ref), ("dx", x.grad, dx), ("dweight", module.weight.grad, dw),
                                   ("dbias", module.bias.grad, db)], f"{tuple(x.shape)} x {tuple(module.weight.shape)}")


def fp8_support(te):
    if hasattr(te, "is_fp8_available"):
        return te.is_fp8_available(return_reason=True)
    from transformer_engine.pytorch.fp8 import check_fp8_support  # before TE 2.9

    return check_fp8_support()


def fp8_autocast(te, recipe):
    if hasattr(te, "autocast"):  # TE 2.9 renamed fp8_autocast(fp8_recipe=) to autocast(recipe=)
        return te.autocast(enabled=True, recipe=recipe)
    return te.fp8_autocast(enabled=True, fp8_recipe=recipe)


def check_fp8_linear(torch, profile, seed, steps=3, device="cuda"):
    if not profile.fp8:
        raise _common.Skipped(f"profile {profile.key!r} has no fp8 (compute capability {profile.arch})")
    import transformer_engine.pytorch as te
    from transformer_engine.common.recipe import DelayedScaling, Format

    available, why = fp8_support(te)
    if not available:
        raise _common.Failed(f"profile {profile.key!r} has fp8 but transformer-engine says: {why}")
    x, dy, module = linear_case(torch, seed, device)
    bf16_out = run_linear(x, dy, module).detach()
    recipe = DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=16, amax_compute_algo="max")
    for _ in range(steps):  # delayed scaling takes its scales from the amax of earlier steps
        x.grad = None
        module.zero_grad(set_to_none=True)
        with fp8_autocast(te, recipe):
            out = module(x)
        out.backward(dy)
    ref, dx, dw, db = linear_reference(torch, x, dy, module)
    numbers, problems = {}, []
    limit = profile.max_rel_err("fp8")
    for name, got, want in (("out", out, ref), ("dx", x.grad, dx), ("dweight", module.weight.grad, dw)):
        _common.compare(numbers, problems, name, got, want, limit)
    numbers["bf16_out_rel_err"] = _common.relative_error(bf16_out, ref)
    # fp8 rounds 16x coarser than bf16: an error no larger than bf16's means fp8 never ran
    if not numbers["out_rel_err"] > numbers["bf16_out_rel_err"]:
        problems.append("fp8 output is as exact as bf16: the fp8 GEMM did not run")
    return _common.verdict(numbers, problems, f"DelayedScaling HYBRID, {steps} steps, {tuple(x.shape)} x "
                                              f"{tuple(module.weight.shape)}")


def checks(profile, torch):
    return [
        ("transformer-engine/import", check_import),
        ("transformer-engine/layernorm/fwd+bwd/bf16", lambda: check_layer_norm(torch, profile, seed=1)),
        ("transformer-engine/rmsnorm/fwd+bwd/bf16", lambda: check_rms_norm(torch, profile, seed=2)),
        ("transformer-engine/linear/fwd+bwd/bf16", lambda: check_linear(torch, profile, seed=3)),
        ("transformer-engine/linear/fwd+bwd/fp8", lambda: check_fp8_linear(torch, profile, seed=4)),
    ]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"transformer_engine": "transformer-engine", "torch": "torch"}, checks))
