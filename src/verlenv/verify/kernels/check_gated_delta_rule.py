"""GPU checks of flash-linear-attention's gated delta rule, the kernels of the gated-DeltaNet layers of Qwen3.5 and
Qwen3-Next: chunk_gated_delta_rule (training and prefill) forward and backward, padded and packed (cu_seqlens, as
verl's remove-padding runs), and fused_recurrent_gated_delta_rule (cached decode) forward, each against the
recurrence computed step by step in float64. Inputs are what transformers 5.9's Qwen3-Next layer passes: bf16 q, k
(normalised in the kernel: use_qk_l2norm_in_kernel), v and beta, a float32 log-decay g.

fused_recurrent_gated_delta_rule has no backward in fla 0.5.2 (its autograd Function raises NotImplementedError,
fla/ops/gated_delta_rule/fused_recurrent.py); transformers calls it only for cached single-token decode, never in
training, so only its forward is checked.

Run: python check_gated_delta_rule.py --out results.json --profile '{"key": "h100", "arch": "9.0", "fp8": true}'
"""

import sys

import _common

PACKAGE = "flash-linear-attention"
# Relative error limits (||got - want|| / ||want||, fla's own get_err_ratio) of bf16 kernels against float64.
# fla's tests allow o/ht 0.005, dq/dk/dv 0.008, dbeta/dg 0.02 in fp16 against a float32 reference
# (tests/ops/test_gated_delta.py); bf16 rounds 8x coarser than fp16, but the reference here starts from the same
# bf16 inputs, so only the kernel's own roundings count: 4x fp16's limits.
LIMITS = {"out": 0.02, "ht": 0.02, "dq": 0.032, "dk": 0.032, "dv": 0.032, "dbeta": 0.08, "dg": 0.08}
# (batch, seqlen, heads, head_dim): Qwen3-Next's DeltaNet heads are 128 wide (linear_key/value_head_dim); 300 tokens
# leave a partial last chunk of the kernel's 64.
SHAPE = (2, 300, 4, 128)
# Packed sequences of uneven lengths (verl's remove-padding path: transformers passes cu_seq_lens_q as cu_seqlens).
LENGTHS = (63, 200, 129)


def l2norm(torch, x, eps=1e-6):
    """fla's l2norm (fla/modules/l2norm.py): x / sqrt(sum x^2 + eps) over the last dim."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def reference(torch, q, k, v, g, beta, scale=None, initial_state=None, qk_l2norm=True):
    """The gated delta rule, one step at a time, in the inputs' dtype (float64 in the checks). Per head, with the
    state S of shape (head_dim_k, head_dim_v):
        S <- S * exp(g_t);  u_t = beta_t * (v_t - S^T k_t);  S <- S + k_t u_t^T;  o_t = scale * S^T q_t
    q, k: (batch, seqlen, heads, K); v: (batch, seqlen, heads, V); g, beta: (batch, seqlen, heads);
    initial_state: (batch, heads, K, V). Returns (o of v's shape, the final state)."""
    if qk_l2norm:
        q, k = l2norm(torch, q), l2norm(torch, k)
    batch, seqlen, heads, dim_k = k.shape
    scale = dim_k ** -0.5 if scale is None else scale
    state = (torch.zeros(batch, heads, dim_k, v.shape[-1], dtype=v.dtype, device=v.device)
             if initial_state is None else initial_state)
    outs = []
    for t in range(seqlen):
        state = state * g[:, t].exp()[..., None, None]
        kt = k[:, t]
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhk,bhkv->bhv", kt, state))
        state = state + kt[..., :, None] * u[..., None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, state))
    return torch.stack(outs, dim=1), state


def random_inputs(torch, shape, seed, device):
    """bf16 q, k, v, beta (sigmoid of a logit) and a float32 log-decay g in (-inf, 0), as transformers makes them."""
    batch, seqlen, heads, dim = shape
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*size, dtype=torch.bfloat16):
        return torch.randn(size, device=device, dtype=torch.float32, generator=gen).to(dtype)

    q, k, v = (randn(batch, seqlen, heads, dim) for _ in range(3))
    beta = randn(batch, seqlen, heads).float().sigmoid().to(torch.bfloat16)
    g = torch.nn.functional.logsigmoid(randn(batch, seqlen, heads, dtype=torch.float32))
    return [t.requires_grad_() for t in (q, k, v, g, beta)]


def leaves64(torch, tensors):
    return [t.detach().double().requires_grad_() for t in tensors]


def judge(names, got, want, note):
    numbers, problems = {}, []
    for name, g, w in zip(names, got, want):
        if g is None:  # the kernel's backward returned no gradient for an input that has one
            problems.append(f"{name}: no gradient")
            continue
        _common.compare(numbers, problems, name, g, w, LIMITS[name])
    return _common.verdict(numbers, problems, note)


def check_import():
    import fla
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule  # noqa: F401

    return {}, f"flash-linear-attention {fla.__version__} from {fla.__file__}"


def check_chunk(torch, seed, shape=SHAPE, device="cuda"):
    """Forward and backward of the training path: grads of q, k, v, g and beta."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    inputs = random_inputs(torch, shape, seed, device)
    dout = torch.randn(inputs[2].shape, device=device, dtype=torch.bfloat16,
                       generator=torch.Generator(device=device).manual_seed(seed + 1000))
    out, _ = chunk_gated_delta_rule(*inputs, use_qk_l2norm_in_kernel=True)
    out.backward(dout)
    ref_inputs = leaves64(torch, inputs)
    want, _ = reference(torch, *ref_inputs)
    want.backward(dout.double())
    names = ("out", "dq", "dk", "dv", "dg", "dbeta")
    batch, seqlen, heads, dim = shape
    return judge(names, [out, *(t.grad for t in inputs)], [want, *(t.grad for t in ref_inputs)],
                 f"bf16, batch {batch}, seqlen {seqlen}, heads {heads}, head_dim {dim}, qk l2norm in the kernel")


def check_chunk_varlen(torch, seed, lengths=LENGTHS, heads=4, dim=128, device="cuda"):
    """Packed sequences (batch 1, cu_seqlens): no state may leak from one sequence into the next."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    inputs = random_inputs(torch, (1, sum(lengths), heads, dim), seed, device)
    dout = torch.randn(inputs[2].shape, device=device, dtype=torch.bfloat16,
                       generator=torch.Generator(device=device).manual_seed(seed + 1000))
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    cu_seqlens = torch.tensor(bounds, dtype=torch.long, device=device)
    out, _ = chunk_gated_delta_rule(*inputs, use_qk_l2norm_in_kernel=True, cu_seqlens=cu_seqlens)
    out.backward(dout)
    ref_inputs = leaves64(torch, inputs)
    want = torch.cat([reference(torch, *(t[:, a:b] for t in ref_inputs))[0] for a, b in zip(bounds, bounds[1:])],
                     dim=1)
    want.backward(dout.double())
    return judge(("out", "dq", "dk", "dv", "dg", "dbeta"), [out, *(t.grad for t in inputs)],
                 [want, *(t.grad for t in ref_inputs)],
                 f"bf16, packed lengths {list(lengths)}, heads {heads}, head_dim {dim}")


def check_fused_recurrent(torch, seed, shape=(2, 16, 4, 128), device="cuda"):
    """Decode steps from a cached state: the outputs and the final state (forward only: see the docstring)."""
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    batch, seqlen, heads, dim = shape
    with torch.no_grad():
        q, k, v, g, beta = (t.detach() for t in random_inputs(torch, shape, seed, device))
        gen = torch.Generator(device=device).manual_seed(seed + 2000)
        h0 = torch.randn(batch, heads, dim, dim, device=device, dtype=torch.float32, generator=gen) * 0.1
        out, ht = fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=h0.clone(),
                                                   output_final_state=True, use_qk_l2norm_in_kernel=True)
        want, want_ht = reference(torch, *(t.double() for t in (q, k, v, g, beta)), initial_state=h0.double())
    return judge(("out", "ht"), [out, ht], [want, want_ht],
                 f"bf16, batch {batch}, {seqlen} steps from a random state, heads {heads}, head_dim {dim}")


def checks(profile, torch):
    return [
        ("flash-linear-attention/import", check_import),
        ("flash-linear-attention/chunk_gated_delta_rule/fwd+bwd/bf16", lambda: check_chunk(torch, seed=0)),
        ("flash-linear-attention/chunk_gated_delta_rule/varlen/fwd+bwd/bf16",
         lambda: check_chunk_varlen(torch, seed=1)),
        ("flash-linear-attention/fused_recurrent_gated_delta_rule/fwd/bf16",
         lambda: check_fused_recurrent(torch, seed=2)),
    ]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"fla": "flash-linear-attention", "torch": "torch"}, checks))
