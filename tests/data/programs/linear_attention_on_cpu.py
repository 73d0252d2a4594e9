"""Runs inside an environment with torch (and, where it has them, fla and transformers): the gated-DeltaNet checks'
references against independent computations (a scalar loop, fla's naive recurrence, transformers' own torch fallback),
then each check's comparison logic against stand-ins for the GPU-only kernels (the reference in float32, rounded as
the kernel rounds), which must pass, and broken stand-ins, which must fail. Writes {scenario: {status, reason}}."""
import importlib.util
import json
import math
import os
import sys
import types

KERNELS, OUT = sys.argv[1], sys.argv[2]
sys.path.insert(0, KERNELS)  # the scripts find _common as their own folder's module

import torch  # noqa: E402

torch.set_num_threads(2)
common = importlib.import_module("_common")
gdr = importlib.import_module("check_gated_delta_rule")
conv = importlib.import_module("check_causal_conv1d")
PROFILE = common.parse_profile('{"key": "h100", "arch": "9.0", "fp8": true, "thresholds": {}}')
REPORT = common.Report(os.path.join(OUT, "scenarios.json"))
results = {}


def scenario(name, fn):
    result = common.run_check(REPORT, name, "test", fn)
    results[name] = {"status": result["status"], "reason": result["reason"]}


def have(module):
    return importlib.util.find_spec(module) is not None


def agree(numbers_name, got, want, limit):
    numbers, problems = {}, []
    common.compare(numbers, problems, numbers_name, got, want, limit)
    return common.verdict(numbers, problems)


# ---- the references against independent computations (float64) ----

def gdr_scalar_loop(q, k, v, g, beta, h0):
    """The gated delta rule for one head, in plain Python floats: q, k (T, K), v (T, V), g, beta (T,), h0 (K, V)."""
    K, V = len(k[0]), len(v[0])
    S = [row[:] for row in h0]
    out = []
    for t in range(len(q)):
        qn, kn = (math.sqrt(sum(x * x for x in vec) + 1e-6) for vec in (q[t], k[t]))
        qt, kt = [x / qn * K ** -0.5 for x in q[t]], [x / kn for x in k[t]]
        decay = math.exp(g[t])
        S = [[s * decay for s in row] for row in S]
        u = [beta[t] * (v[t][j] - sum(kt[i] * S[i][j] for i in range(K))) for j in range(V)]
        S = [[S[i][j] + kt[i] * u[j] for j in range(V)] for i in range(K)]
        out.append([sum(qt[i] * S[i][j] for i in range(K)) for j in range(V)])
    return out, S


def gdr_vs_scalar_loop():
    q, k, v, g, beta = (t.detach().double() for t in gdr.random_inputs(torch, (1, 9, 1, 5), 0, "cpu"))
    h0 = torch.randn(1, 1, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    o, ht = gdr.reference(torch, q, k, v, g, beta, initial_state=h0)
    want_o, want_ht = gdr_scalar_loop(q[0, :, 0].tolist(), k[0, :, 0].tolist(), v[0, :, 0].tolist(),
                                      g[0, :, 0].tolist(), beta[0, :, 0].tolist(), h0[0, 0].tolist())
    agree("out", o[0, :, 0], torch.tensor(want_o, dtype=torch.float64), 1e-12)
    return agree("ht", ht[0, 0], torch.tensor(want_ht, dtype=torch.float64), 1e-12)


scenario("reference/gated_delta_rule/scalar-loop", gdr_vs_scalar_loop)

if have("fla"):
    def gdr_vs_fla_naive():
        from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

        q, k, v, g, beta = (t.detach().double() for t in gdr.random_inputs(torch, (2, 70, 3, 16), 2, "cpu"))
        h0 = torch.randn(2, 3, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
        o, ht = gdr.reference(torch, q, k, v, g, beta, initial_state=h0)
        # fla's naive recurrence computes in float32 and takes q, k already normalised.
        want_o, want_ht = naive_recurrent_gated_delta_rule(
            gdr.l2norm(torch, q).float(), gdr.l2norm(torch, k).float(), v.float(), beta.float(), g.float(),
            initial_state=h0.float(), output_final_state=True)
        agree("out", o, want_o, 1e-5)
        return agree("ht", ht, want_ht, 1e-5)

    scenario("reference/gated_delta_rule/fla-naive", gdr_vs_fla_naive)

if have("transformers"):
    def gdr_vs_transformers_fallback():
        """transformers' chunked torch path (what a Qwen3-Next layer runs without the fast path), forward and
        backward, in float64: a different formulation (64-token chunks, a triangular solve) of the same rule."""
        from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule

        inputs = [t.detach().double().requires_grad_() for t in gdr.random_inputs(torch, (2, 150, 2, 16), 4, "cpu")]
        twins = [t.detach().clone().requires_grad_() for t in inputs]
        dout = torch.randn(2, 150, 2, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
        o, _ = gdr.reference(torch, *inputs)
        o.backward(dout)
        q, k, v, g, beta = twins
        want, _ = torch_chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
        want.backward(dout.to(want.dtype))
        for name, a, b in zip(("dq", "dk", "dv", "dg", "dbeta"), inputs, twins):
            agree(name, a.grad, b.grad, 1e-5)  # the fallback computes in float32
        return agree("out", o, want, 1e-5)

    scenario("reference/gated_delta_rule/transformers-fallback", gdr_vs_transformers_fallback)


def conv_vs_scalar_loop():
    """The causal conv reference (and its seq_idx form) against taps summed one by one."""
    x, weight, bias, _ = conv.random_inputs(torch, (2, 3, 30, 4), torch.float64, 6, "cpu")
    seq_idx = torch.tensor([[0] * 7 + [1] * 20 + [2] * 3, [5] * 30], dtype=torch.int32)
    got_plain, got_packed = conv.reference(torch, x, weight, bias), conv.reference(torch, x, weight, bias,
                                                                                    seq_idx=seq_idx)
    plain, packed = torch.zeros_like(got_plain), torch.zeros_like(got_plain)
    for b in range(2):
        for c in range(3):
            for t in range(30):
                taps = [(j, t - 3 + j) for j in range(4) if t - 3 + j >= 0]
                plain[b, c, t] = bias[c] + sum(weight[c, j] * x[b, c, s] for j, s in taps)
                packed[b, c, t] = bias[c] + sum(weight[c, j] * x[b, c, s] for j, s in taps
                                                if seq_idx[b, s] == seq_idx[b, t])
    agree("plain", got_plain, torch.nn.functional.silu(plain), 1e-12)
    return agree("packed", got_packed, torch.nn.functional.silu(packed), 1e-12)


scenario("reference/causal_conv1d/scalar-loop", conv_vs_scalar_loop)


def conv_update_vs_full():
    """A decode step after a state equals the last output of the full convolution over state + step."""
    x, weight, bias, _ = conv.random_inputs(torch, (2, 8, 7, 4), torch.float64, 7, "cpu")
    state = x[..., :3].detach().clone()
    out, new_state = conv.update_reference(torch, x[..., 3:4].detach(), state, weight.detach(), bias.detach())
    full = conv.reference(torch, x[..., :4].detach(), weight.detach(), bias.detach())
    agree("state", new_state, x[..., 1:4].detach(), 0.0)
    return agree("out", out, full[..., 3:4], 1e-12)


scenario("reference/causal_conv1d/update", conv_update_vs_full)


# ---- each check's logic against stand-ins for the kernels ----

def uninstall(*packages):
    for name in [n for n in sys.modules if n.split(".")[0] in packages]:
        del sys.modules[name]


def install(name, **attrs):
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def bf16_reference_gdr(ignore_gate=False, leak_state=False):
    """chunk/fused_recurrent stand-ins: the reference in float32, the output in the inputs' dtype; broken ones
    forget the decay, or carry the state across packed sequences."""

    def run(q, k, v, g, beta, initial_state=None, cu_seqlens=None):
        g = g * 0 if ignore_gate else g
        f32 = [t.float() for t in (q, k, v, g, beta)]
        h0 = None if initial_state is None else initial_state.float()
        if cu_seqlens is None or leak_state:
            out, ht = gdr.reference(torch, *f32, initial_state=h0)
        else:
            bounds = cu_seqlens.tolist()
            out = torch.cat([gdr.reference(torch, *(t[:, a:b] for t in f32))[0] for a, b in zip(bounds, bounds[1:])], 1)
            ht = None
        return out.to(q.dtype), ht

    def chunk(q, k, v, g, beta, use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kw):
        assert use_qk_l2norm_in_kernel
        return run(q, k, v, g, beta, kw.get("initial_state"), cu_seqlens)

    def fused(q, k, v, g=None, beta=None, initial_state=None, output_final_state=False, **kw):
        return run(q, k, v, g, beta, initial_state)

    return chunk, fused


def install_fla(**kw):
    uninstall("fla")
    chunk, fused = bf16_reference_gdr(**kw)
    install("fla", __version__="stand-in", __file__="stand-in")
    install("fla.ops")
    install("fla.ops.gated_delta_rule", chunk_gated_delta_rule=chunk, fused_recurrent_gated_delta_rule=fused)


SMALL = (1, 70, 2, 16)
install_fla()
scenario("gdr/import", gdr.check_import)
scenario("gdr/chunk", lambda: gdr.check_chunk(torch, 0, SMALL, "cpu"))
scenario("gdr/chunk/varlen", lambda: gdr.check_chunk_varlen(torch, 1, (13, 40, 20), 2, 16, "cpu"))
scenario("gdr/fused_recurrent", lambda: gdr.check_fused_recurrent(torch, 2, (2, 6, 2, 16), "cpu"))
install_fla(ignore_gate=True)
scenario("gdr/chunk/broken", lambda: gdr.check_chunk(torch, 0, SMALL, "cpu"))
scenario("gdr/fused_recurrent/broken", lambda: gdr.check_fused_recurrent(torch, 2, (2, 6, 2, 16), "cpu"))
install_fla(leak_state=True)
scenario("gdr/chunk/varlen/broken", lambda: gdr.check_chunk_varlen(torch, 1, (13, 40, 20), 2, 16, "cpu"))
uninstall("fla")


def install_conv(acausal=False, ignore_seq_idx=False):
    """causal_conv1d stand-ins: the reference in float32 (the kernel accumulates in float32), the output in x's dtype;
    broken ones look one token ahead, or convolve across packed sequences."""

    def fn(x, weight, bias=None, seq_idx=None, activation=None, **kw):
        x32 = x.float()
        if acausal:
            x32 = torch.nn.functional.pad(x32[..., 1:], (0, 1))
        out = conv.reference(torch, x32, weight.float(), bias.float(), activation,
                             None if ignore_seq_idx else seq_idx)
        return out.to(x.dtype)

    def update(x, conv_state, weight, bias=None, activation=None, **kw):
        out, new_state = conv.update_reference(torch, x.float(), conv_state.float(), weight.float(), bias.float(),
                                               activation)
        conv_state.copy_(new_state if not acausal else new_state.roll(1, -1))
        return out.to(x.dtype)

    uninstall("causal_conv1d", "causal_conv1d_cuda")
    install("causal_conv1d", __version__="stand-in", __file__="stand-in", causal_conv1d_fn=fn,
            causal_conv1d_update=update)
    install("causal_conv1d_cuda")


CONV = (2, 16, 40, 4)
install_conv()
scenario("conv/import", conv.check_import)
scenario("conv/bf16", lambda: conv.check_fwd_bwd(torch, PROFILE, "bf16", 0, CONV, device="cpu"))
scenario("conv/fp32", lambda: conv.check_fwd_bwd(torch, PROFILE, "fp32", 1, CONV, channel_last=False, device="cpu"))
scenario("conv/seq_idx", lambda: conv.check_fwd_bwd(torch, PROFILE, "bf16", 2, CONV, packed=True, device="cpu"))
scenario("conv/update", lambda: conv.check_update(torch, PROFILE, 3, 2, 16, 4, 1, "cpu"))
install_conv(acausal=True)
scenario("conv/bf16/broken", lambda: conv.check_fwd_bwd(torch, PROFILE, "bf16", 0, CONV, device="cpu"))
scenario("conv/update/broken", lambda: conv.check_update(torch, PROFILE, 3, 2, 16, 4, 1, "cpu"))
install_conv(ignore_seq_idx=True)
scenario("conv/seq_idx/broken", lambda: conv.check_fwd_bwd(torch, PROFILE, "bf16", 2, CONV, packed=True, device="cpu"))
uninstall("causal_conv1d", "causal_conv1d_cuda")

with open(os.path.join(OUT, "driver.json"), "w") as f:
    json.dump(results, f, indent=1)
