"""Runs inside an environment with torch (and, where it has them, triton, verl, transformers). flash-attn, apex and
transformer-engine cannot exist without a GPU: stand-ins (test doubles) take their names, computing the same
functions with torch; each also has a broken variant that the check must catch."""
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
import types

os.environ["TRITON_INTERPRET"] = "1"  # Triton's interpreter runs kernels on the CPU
os.environ["HF_HUB_OFFLINE"] = "1"
KERNELS, OUT = sys.argv[1], sys.argv[2]


def load(name):
    for helper in ("_common", "_jit_caches", "_engines"):  # what the scripts import from their own folder
        if helper not in sys.modules:
            spec = importlib.util.spec_from_file_location(helper, os.path.join(KERNELS, f"{helper}.py"))
            sys.modules[helper] = module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    spec = importlib.util.spec_from_file_location(f"kernel_check_{name}", os.path.join(KERNELS, f"check_{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


import torch

torch.set_num_threads(2)
tm = load("torch")
common = sys.modules["_common"]
PROFILE = common.parse_profile('{"key": "h100", "arch": "9.0", "fp8": true, "thresholds": {}}')
NO_FP8 = common.parse_profile('{"key": "a100", "arch": "8.0", "fp8": false, "thresholds": {}}')
REPORT = common.Report(os.path.join(OUT, "scenarios.json"))
results = {}


def scenario(name, fn):
    result = common.run_check(REPORT, name, "test", fn)
    results[name] = {"status": result["status"], "reason": result["reason"]}


def have(module):
    return importlib.util.find_spec(module) is not None


def install(name, module):
    sys.modules[name] = module
    return module


def uninstall(*packages):
    for name in [n for n in sys.modules if n.split(".")[0] in packages]:
        del sys.modules[name]


# A whole script through _common.main: torch is here, a GPU is not.
common.main("torch", {"torch": "torch"}, tm.checks, argv=["--out", os.path.join(OUT, "torch.json"),
                                                          "--profile", '{"key": "h100", "arch": "9.0", "fp8": true}'])
results["torch/main"] = json.load(open(os.path.join(OUT, "torch.json")))[0]

# Real packages first: the stand-ins below must not leak into them.
if have("triton"):
    tr = load("triton")
    scenario("triton/vector-add", lambda: tr.check_vector_add(torch, "cpu", (1 << 12) + 17))
    scenario("triton/softmax", lambda: tr.check_softmax(torch, PROFILE, "cpu", 8, 781))

if have("verl"):
    vl = load("verl")
    scenario("verl/gae", lambda: vl.check_gae(torch, PROFILE, "cpu"))
    scenario("verl/grpo", lambda: vl.check_grpo(torch, PROFILE, "cpu"))
    import verl.trainer.ppo.core_algos as core_algos

    original = core_algos.compute_gae_advantage_return
    core_algos.compute_gae_advantage_return = lambda **kw: original(**{**kw, "lam": 0.5})
    scenario("verl/gae/broken", lambda: vl.check_gae(torch, PROFILE, "cpu"))
    core_algos.compute_gae_advantage_return = original

if have("transformers") and have("tokenizers"):
    def tiny_model():
        from transformers import AutoTokenizer

        vm = load("vllm")
        directory = tempfile.mkdtemp(dir=OUT)
        vm.write_tiny_model(directory, torch)
        prompts = vm.prompt_token_ids(torch)[:3]
        first, _ = sys.modules["_engines"].transformers_greedy(torch, directory, prompts, device="cpu")
        again, _ = sys.modules["_engines"].transformers_greedy(torch, directory, prompts, device="cpu")
        tokenizer = AutoTokenizer.from_pretrained(directory)
        problems = []
        if first != again or any(len(p) != vm.NEW_TOKENS for p in first):
            problems.append(f"greedy picks {first} then {again}")
        words = tokenizer.decode(first[0]).split()
        if len(tokenizer) != vm.VOCAB or len(words) != vm.NEW_TOKENS:
            problems.append(f"tokenizer of {len(tokenizer)} words decodes {words}")
        return common.verdict({}, problems)

    scenario("vllm/tiny-model", tiny_model)


def attention(q, k, v, causal, ignore_causal):
    """What flash-attn computes, rounded where it rounds: fp32 scores, probabilities in the input dtype."""
    s = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) * q.shape[-1] ** -0.5
    if causal and not ignore_causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    p = torch.softmax(s, -1)
    return torch.einsum("bhqk,bkhd->bqhd", p.to(q.dtype).float(), v.float()).to(q.dtype)


def flash_attn_stand_in(ignore_causal=False):
    fa = types.ModuleType("flash_attn")
    fa.flash_attn_func = lambda q, k, v, causal=False: attention(q, k, v, causal, ignore_causal)

    def varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=False):
        bounds = cu_q.tolist()
        return torch.cat([attention(q[a:b][None], k[a:b][None], v[a:b][None], causal, ignore_causal)[0]
                          for a, b in zip(bounds, bounds[1:])])

    fa.flash_attn_varlen_func = varlen
    return fa


fa = load("flash_attn")
install("flash_attn", flash_attn_stand_in())
SHAPE = (1, 256, 2, 64)
scenario("flash_attn/bf16/causal", lambda: fa.check_fwd_bwd(torch, PROFILE, "bf16", True, 0, SHAPE, "cpu"))
scenario("flash_attn/fp16/noncausal", lambda: fa.check_fwd_bwd(torch, PROFILE, "fp16", False, 1, SHAPE, "cpu"))
scenario("flash_attn/varlen", lambda: fa.check_varlen(torch, PROFILE, 2, (17, 128, 64), 2, 64, "cpu"))
install("flash_attn", flash_attn_stand_in(ignore_causal=True))
scenario("flash_attn/bf16/causal/broken", lambda: fa.check_fwd_bwd(torch, PROFILE, "bf16", True, 0, SHAPE, "cpu"))
scenario("flash_attn/varlen/broken", lambda: fa.check_varlen(torch, PROFILE, 2, (17, 128, 64), 2, 64, "cpu"))
uninstall("flash_attn")


class LayerNorm(torch.nn.LayerNorm):
    """Computes in fp32 and rounds once, as the fused kernels do."""

    def forward(self, x):
        return torch.nn.functional.layer_norm(x.float(), self.normalized_shape, self.weight.float(),
                                              self.bias.float(), self.eps).to(x.dtype)


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, torch.nn.Parameter(torch.ones(hidden))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


def apex_stand_in(adam_class):
    normalization = install("apex.normalization", types.ModuleType("apex.normalization"))
    normalization.FusedLayerNorm = lambda hidden, eps=1e-5: LayerNorm(hidden, eps=eps)
    normalization.FusedRMSNorm = RMSNorm
    optimizers = install("apex.optimizers", types.ModuleType("apex.optimizers"))
    optimizers.FusedAdam = lambda params, adam_w_mode=True, **kw: adam_class(params, **kw)
    install("apex", types.ModuleType("apex"))
    wgrad = install("fused_weight_gradient_mlp_cuda", types.ModuleType("fused_weight_gradient_mlp_cuda"))

    def accumulate(inputs, d_output, d_weight):
        flat_in, flat_out = inputs.reshape(-1, inputs.shape[-1]), d_output.reshape(-1, d_output.shape[-1])
        d_weight += (flat_out.float().T @ flat_in.float()).to(d_weight.dtype)

    wgrad.wgrad_gemm_accum_fp32 = wgrad.wgrad_gemm_accum_fp16 = accumulate


ap = load("apex")
apex_stand_in(torch.optim.AdamW)
scenario("apex/layer_norm", lambda: ap.check_layer_norm(torch, PROFILE, 1, 64, 256, "cpu"))
scenario("apex/rms_norm", lambda: ap.check_rms_norm(torch, PROFILE, 2, 64, 256, "cpu"))
scenario("apex/fused_adam", lambda: ap.check_fused_adam(torch, PROFILE, 3, device="cpu"))
scenario("apex/wgrad/fp32", lambda: ap.check_wgrad_gemm(torch, PROFILE, "fp32", "bf16", 4, (2, 16), 64, 48, "cpu"))
scenario("apex/wgrad/fp16", lambda: ap.check_wgrad_gemm(torch, PROFILE, "fp16", "fp16", 5, (2, 16), 64, 48, "cpu"))
apex_stand_in(torch.optim.Adam)  # L2 weight decay instead of AdamW's decoupled one
scenario("apex/fused_adam/broken", lambda: ap.check_fused_adam(torch, PROFILE, 3, device="cpu"))
uninstall("apex", "fused_weight_gradient_mlp_cuda")


def to_fp8(t, dtype):
    scale = torch.finfo(dtype).max / t.detach().abs().max().float()
    return ((t.float() * scale).to(dtype).float() / scale).to(t.dtype)


class Fp8Matmul(torch.autograd.Function):
    """x @ w.T + b with e4m3 operands forward and an e5m2 gradient backward (the HYBRID format)."""

    @staticmethod
    def forward(ctx, x, w, b):
        xq, wq = to_fp8(x, torch.float8_e4m3fn), to_fp8(w, torch.float8_e4m3fn)
        ctx.save_for_backward(xq, wq)
        return xq @ wq.T + b

    @staticmethod
    def backward(ctx, dy):
        xq, wq = ctx.saved_tensors
        dyq = to_fp8(dy, torch.float8_e5m2)
        return dyq @ wq, dyq.T @ xq, dy.sum(0)


def te_stand_in(emulate_fp8):
    fp8 = {"on": False}

    class Linear(torch.nn.Linear):
        def __init__(self, i, o, bias=True, params_dtype=None, device=None):
            super().__init__(i, o, bias=bias, dtype=params_dtype, device=device)

        def forward(self, x):
            return Fp8Matmul.apply(x, self.weight, self.bias) if fp8["on"] and emulate_fp8 else super().forward(x)

    @contextlib.contextmanager
    def autocast(enabled=True, recipe=None):
        fp8["on"] = enabled
        try:
            yield
        finally:
            fp8["on"] = False

    te = install("transformer_engine.pytorch", types.ModuleType("transformer_engine.pytorch"))
    te.LayerNorm = lambda h, eps=1e-5, params_dtype=None, device=None: LayerNorm(h, eps=eps).to(device, params_dtype)
    te.RMSNorm = lambda h, eps=1e-5, params_dtype=None, device=None: RMSNorm(h, eps).to(device, params_dtype)
    te.Linear, te.autocast = Linear, autocast
    te.is_fp8_available = lambda return_reason=False: (True, "")
    recipe = install("transformer_engine.common.recipe", types.ModuleType("transformer_engine.common.recipe"))
    recipe.Format = types.SimpleNamespace(HYBRID="HYBRID")
    recipe.DelayedScaling = lambda **kw: kw
    install("transformer_engine", types.ModuleType("transformer_engine")).pytorch = te
    install("transformer_engine.common", types.ModuleType("transformer_engine.common")).recipe = recipe


tem = load("transformer_engine")
te_stand_in(emulate_fp8=True)
scenario("te/layer_norm", lambda: tem.check_layer_norm(torch, PROFILE, 1, 64, 256, "cpu"))
scenario("te/rms_norm", lambda: tem.check_rms_norm(torch, PROFILE, 2, 64, 256, "cpu"))
scenario("te/linear", lambda: tem.check_linear(torch, PROFILE, 3, "cpu"))
scenario("te/fp8", lambda: tem.check_fp8_linear(torch, PROFILE, 4, device="cpu"))
scenario("te/fp8/no-fp8-profile", lambda: tem.check_fp8_linear(torch, NO_FP8, 4, device="cpu"))
te_stand_in(emulate_fp8=False)
scenario("te/fp8/broken", lambda: tem.check_fp8_linear(torch, PROFILE, 4, device="cpu"))
uninstall("transformer_engine")

json.dump(results, open(os.path.join(OUT, "driver.json"), "w"))
