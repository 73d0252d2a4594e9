"""GPU checks of NVIDIA apex: FusedLayerNorm and FusedRMSNorm (fwd+bwd), FusedAdam against torch AdamW,
and megatron's fused weight-gradient GEMMs (fused_weight_gradient_mlp_cuda) against a float64 matmul.
Fails at once, without a GPU, when the installed `apex` is PyPI's unrelated web toolkit.

Thresholds: bf16_max_rel_err, fp16_max_rel_err, fp32_max_rel_err.
Run: python check_apex.py --out results.json --profile '{"key": "h100", "arch": "9.0", "fp8": true}'
"""

import os
import sys

import _common

PACKAGE = "apex"
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def wrong_apex():
    """Why the installed `apex` is not NVIDIA's, or None. Looks at files only: PyPI's apex imports pyramid."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("apex")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if any(os.path.isfile(os.path.join(p, "normalization", "fused_layer_norm.py")) for p in locations):
        return None
    try:
        meta = importlib.metadata.metadata("apex")
        what = f"apex {meta['Version']} ({meta['Summary']})"
    except importlib.metadata.PackageNotFoundError:
        what = "apex"
    where = locations[0] if locations else (spec.origin if spec else "?")
    return (f"the installed {what} at {where} is not NVIDIA apex (it has no apex.normalization): PyPI's 'apex' "
            "is an unrelated web toolkit; uninstall it and build NVIDIA apex from source")


def check_import():
    import importlib.metadata

    import apex
    from apex.normalization import FusedLayerNorm  # noqa: F401

    try:
        version = importlib.metadata.version("apex")
    except importlib.metadata.PackageNotFoundError:  # a source checkout on sys.path has no metadata
        version = "(no package metadata)"
    return {}, f"NVIDIA apex {version} from {os.path.dirname(apex.__file__)}"


def check_layer_norm(torch, profile, seed, rows=4096, hidden=4096, device="cuda"):
    from apex.normalization import FusedLayerNorm

    x, dy, weight, bias = _common.norm_case(torch, seed, rows, hidden, device)
    module = FusedLayerNorm(hidden, eps=1e-5).to(device, torch.bfloat16)
    return _common.judge_norm(torch, profile, module, x, dy, weight, bias)

def check_rms_norm(torch, profile, seed, rows=4096, hidden=4096, device="cuda"):
    from apex.normalization import FusedRMSNorm

    x, dy, weight, _ = _common.norm_case(torch, seed, rows, hidden, device)
    module = FusedRMSNorm(hidden, eps=1e-5).to(device, torch.bfloat16)
    return _common.judge_norm(torch, profile, module, x, dy, weight)

def check_fused_adam(torch, profile, seed, steps=5, device="cuda"):
    """FusedAdam (AdamW mode) on fp32 parameters against torch's AdamW run in float64 on the same gradients."""
    from apex.optimizers import FusedAdam

    gen = torch.Generator(device=device).manual_seed(seed)
    shapes = [(1024, 1024), (4097,), (33, 7)]
    start = [0.05 * torch.randn(s, device=device, generator=gen) for s in shapes]  # the scale of trained weights
    grads = [[torch.randn(s, device=device, generator=gen) for s in shapes] for _ in range(steps)]
    fused_params = [torch.nn.Parameter(t.clone()) for t in start]
    reference_params = [torch.nn.Parameter(t.double()) for t in start]
    settings = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    fused = FusedAdam(fused_params, adam_w_mode=True, **settings)
    reference = torch.optim.AdamW(reference_params, **settings)
    for step_grads in grads:
        for p, q, g in zip(fused_params, reference_params, step_grads):
            p.grad, q.grad = g.clone(), g.double()
        fused.step()
        reference.step()
    # Compare the updates, not the parameters: the parameters barely move in a few steps.
    got = torch.cat([(p.detach().double() - s.double()).flatten() for p, s in zip(fused_params, start)])
    want = torch.cat([(q.detach() - s.double()).flatten() for q, s in zip(reference_params, start)])
    numbers, problems = {}, []
    _common.compare(numbers, problems, "update", got, want, profile.max_rel_err("fp32"))
    return _common.verdict(numbers, problems, f"{steps} AdamW steps on fp32 parameters, weight decay 0.1")


def check_wgrad_gemm(torch, profile, variant, dtype_name, seed, tokens=(4, 512), in_dim=1024, out_dim=768,
                     device="cuda"):
    """wgrad_gemm_accum_{fp32,fp16}(input, d_output, d_weight): d_weight += d_output^T @ input, leading dims
    of input and d_output flattened; the fp32 variant accumulates into an fp32 main grad, fp16 into a 16-bit one."""
    import fused_weight_gradient_mlp_cuda

    dtype = getattr(torch, DTYPES[dtype_name])
    gen = torch.Generator(device=device).manual_seed(seed)
    inputs = torch.randn(*tokens, in_dim, device=device, dtype=dtype, generator=gen)
    d_output = torch.randn(*tokens, out_dim, device=device, dtype=dtype, generator=gen)
    main_dtype = torch.float32 if variant == "fp32" else dtype
    d_weight = torch.randn(out_dim, in_dim, device=device, generator=gen).to(main_dtype)
    ref = d_weight.double() + d_output.reshape(-1, out_dim).double().T @ inputs.reshape(-1, in_dim).double()
    getattr(fused_weight_gradient_mlp_cuda, f"wgrad_gemm_accum_{variant}")(inputs, d_output, d_weight)
    numbers, problems = {}, []
    limit = profile.max_rel_err("fp32" if variant == "fp32" else dtype_name)
    _common.compare(numbers, problems, "d_weight", d_weight, ref, limit)
    return _common.verdict(numbers, problems, f"{dtype_name} inputs {tuple(inputs.shape)}, {main_dtype} main grad")


def checks(profile, torch):
    return [
        ("apex/import", check_import),
        ("apex/fused_layer_norm/fwd+bwd/bf16", lambda: check_layer_norm(torch, profile, seed=1)),
        ("apex/fused_rms_norm/fwd+bwd/bf16", lambda: check_rms_norm(torch, profile, seed=2)),
        ("apex/fused_adam/fp32", lambda: check_fused_adam(torch, profile, seed=3)),
        ("apex/wgrad_gemm_accum_fp32/bf16", lambda: check_wgrad_gemm(torch, profile, "fp32", "bf16", seed=4)),
        ("apex/wgrad_gemm_accum_fp16/bf16", lambda: check_wgrad_gemm(torch, profile, "fp16", "bf16", seed=5)),
        ("apex/wgrad_gemm_accum_fp16/fp16", lambda: check_wgrad_gemm(torch, profile, "fp16", "fp16", seed=6)),
    ]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"apex": "NVIDIA apex", "torch": "torch"}, checks, vet=wrong_apex))
