"""GPU checks of causal-conv1d, the short convolution of the gated-DeltaNet layers of Qwen3.5 and Qwen3-Next (width 4,
SiLU, over the concatenated q, k, v channels): causal_conv1d_fn forward and backward (grads of x, weight and bias),
padded and with packed sequences (seq_idx), and causal_conv1d_update (cached decode: the output and the updated
state), each against torch's own conv1d in float64. transformers 5.9 takes the gated-DeltaNet fast path only when
this package and flash-linear-attention both import.

Run: python check_causal_conv1d.py --out results.json --profile '{"key": "h100", "arch": "9.0", "fp8": true}'
"""

import sys

import _common

PACKAGE = "causal-conv1d"
# (batch, channels, seqlen, width): Qwen3-Next's conv runs over 2 * 16 * 128 + 32 * 128 = 8192 channels with width 4
# (linear_conv_kernel_dim); fewer channels keep the float64 reference cheap, the kernel's tiling is per channel.
SHAPE = (2, 1024, 1000, 4)
LENGTHS = (100, 513, 387)  # packed sequences of one row, told apart by seq_idx


def reference(torch, x, weight, bias=None, activation="silu", seq_idx=None):
    """Causal depthwise conv1d with torch's conv1d: x (batch, channels, seqlen), weight (channels, width), bias
    (channels,). With seq_idx (batch, seqlen), each run of equal ids is its own sequence: no tap reaches back past its
    start (one conv per run)."""
    width = weight.shape[-1]
    if seq_idx is not None:
        pieces = []
        for row in range(x.shape[0]):
            ids = seq_idx[row].tolist()
            starts = [0] + [t for t in range(1, len(ids)) if ids[t] != ids[t - 1]] + [len(ids)]
            pieces.append(torch.cat([reference(torch, x[row:row + 1, :, a:b], weight, bias, activation)
                                     for a, b in zip(starts, starts[1:])], dim=-1))
        return torch.cat(pieces, dim=0)
    out = torch.nn.functional.conv1d(torch.nn.functional.pad(x, (width - 1, 0)), weight.unsqueeze(1), bias,
                                     groups=x.shape[1])
    return torch.nn.functional.silu(out) if activation in ("silu", "swish") else out


def update_reference(torch, x, conv_state, weight, bias=None, activation="silu"):
    """One cached decode step or a few: x (batch, channels, steps) after the state (batch, channels, state_len);
    returns (output of x's shape, the new state: the last state_len inputs)."""
    both = torch.cat([conv_state, x], dim=-1)
    out = reference(torch, both, weight, bias, activation)[..., -x.shape[-1]:]
    return out, both[..., -conv_state.shape[-1]:]


def random_inputs(torch, shape, dtype, seed, device):
    batch, channels, seqlen, width = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(batch, channels, seqlen, device=device, dtype=dtype, generator=gen)
    # Scaled like nn.Conv1d's default init (fan-in = width), so the outputs stay O(1).
    weight = torch.randn(channels, width, device=device, dtype=dtype, generator=gen) * width ** -0.5
    bias = torch.randn(channels, device=device, dtype=dtype, generator=gen) * 0.1
    dout = torch.randn(batch, channels, seqlen, device=device, dtype=dtype, generator=gen)
    return x.requires_grad_(), weight.requires_grad_(), bias.requires_grad_(), dout


def judge(profile, dtype_name, names, got, want, note):
    numbers, problems = {}, []
    for name, g, w in zip(names, got, want):
        _common.compare(numbers, problems, name, g, w, profile.max_rel_err(dtype_name))
    return _common.verdict(numbers, problems, note)


def check_import():
    import causal_conv1d
    import causal_conv1d_cuda  # noqa: F401  the compiled kernels: an ABI mismatch with torch fails here

    return {}, f"causal-conv1d {causal_conv1d.__version__} from {causal_conv1d.__file__}"


def check_fwd_bwd(torch, profile, dtype_name, seed, shape=SHAPE, channel_last=True, packed=False, device="cuda"):
    """channel_last: x laid out (batch, seqlen, channels) in memory, as transformers passes it (the transposed
    projection); the kernel has a separate code path for each layout, and seq_idx works in this one only."""
    from causal_conv1d import causal_conv1d_fn

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    batch, channels, seqlen, width = shape if not packed else (1, shape[1], sum(LENGTHS), shape[3])
    x, weight, bias, dout = random_inputs(torch, (batch, channels, seqlen, width), dtype, seed, device)
    if channel_last or packed:
        x = x.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()
    seq_idx = None
    if packed:  # int32, one id per sequence (csrc/causal_conv1d.cpp checks both)
        ids = [torch.full((n,), i, dtype=torch.int32, device=device) for i, n in enumerate(LENGTHS)]
        seq_idx = torch.cat(ids)[None]
    out = causal_conv1d_fn(x, weight, bias, seq_idx=seq_idx, activation="silu")
    out.backward(dout)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, weight, bias))
    want = reference(torch, x64, w64, b64, "silu", seq_idx)
    want.backward(dout.double())
    shape_note = f"packed lengths {list(LENGTHS)}" if packed else f"batch {batch}, seqlen {seqlen}"
    note = (f"{dtype_name}, silu, {shape_note}, channels {channels}, width {width}, "
            f"{'channel-last' if channel_last or packed else 'contiguous'}")
    return judge(profile, dtype_name, ("out", "dx", "dweight", "dbias"), (out, x.grad, weight.grad, bias.grad),
                 (want, x64.grad, w64.grad, b64.grad), note)


def check_update(torch, profile, seed, batch=4, channels=1024, width=4, steps=1, device="cuda"):
    """Decode: the output of `steps` new tokens and the state the kernel updates in place."""
    from causal_conv1d import causal_conv1d_update

    with torch.no_grad():
        x, weight, bias, _ = random_inputs(torch, (batch, channels, steps, width), torch.bfloat16, seed, device)
        gen = torch.Generator(device=device).manual_seed(seed + 1000)
        state = torch.randn(batch, channels, width - 1, device=device, dtype=torch.bfloat16, generator=gen)
        want, want_state = update_reference(torch, x.double(), state.double(), weight.double(), bias.double())
        out = causal_conv1d_update(x, state, weight, bias, activation="silu")  # updates state in place
    return judge(profile, "bf16", ("out", "state"), (out, state), (want, want_state),
                 f"bf16, silu, batch {batch}, {steps} step(s), channels {channels}, width {width}")


def checks(profile, torch):
    return [
        ("causal-conv1d/import", check_import),
        ("causal-conv1d/fwd+bwd/bf16", lambda: check_fwd_bwd(torch, profile, "bf16", seed=0)),
        ("causal-conv1d/fwd+bwd/fp32/contiguous",
         lambda: check_fwd_bwd(torch, profile, "fp32", seed=1, channel_last=False)),
        ("causal-conv1d/seq_idx/fwd+bwd/bf16", lambda: check_fwd_bwd(torch, profile, "bf16", seed=2, packed=True)),
        ("causal-conv1d/update/bf16", lambda: check_update(torch, profile, seed=3)),
    ]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"causal_conv1d": "causal-conv1d", "torch": "torch"}, checks))
