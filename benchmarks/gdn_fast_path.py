"""What the gated-DeltaNet fast path is worth to a training step: a Qwen3-Next model of the published per-layer sizes
(fewer layers, random weights, bf16) runs forward and backward on the GPU in three modes, in one process, back to back:

- `fast`: as transformers builds it with causal-conv1d and flash-linear-attention both importable (its fast path);
- `conv-torch`: every DeltaNet layer's short convolution on torch's path (`causal_conv1d_fn = None`), the rest as in
  `fast`: what an env without causal-conv1d trains on (transformers then prints "The fast path is not available");
- `all-torch`: the delta rule on torch's path too (`torch_chunk_gated_delta_rule`): neither package.

Each mode's step time is the median of --repeat timed steps after --warmup; the ratios to `fast` are of one run.
Run in the env (it needs a GPU): python benchmarks/gdn_fast_path.py --out docs/benchmarks/gdn-fast-path-<gpu>.json
"""

import argparse
import json
import statistics
import sys
import time

MODES = ("fast", "conv-torch", "all-torch")
# Qwen3-Next-80B-A3B's per-layer sizes (its config.json), 4 layers in its 3:1 pattern, 8 small experts.
CONFIG = dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
              linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
              intermediate_size=5120, moe_intermediate_size=512, shared_expert_intermediate_size=512, num_experts=8,
              num_experts_per_tok=2, vocab_size=4096, max_position_embeddings=8192,
              layer_types=["linear_attention"] * 3 + ["full_attention"], num_hidden_layers=4)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give a whole number of at least 1")
    return value


def set_mode(model, mode: str, modeling) -> int:
    """Put every gated-DeltaNet layer of the model on the mode's paths; the number of layers changed."""
    layers = [m for m in model.modules() if type(m).__name__ == "Qwen3NextGatedDeltaNet"]
    for layer in layers:
        layer.causal_conv1d_fn = modeling.causal_conv1d_fn if mode == "fast" else None
        torch_rule = mode == "all-torch" or modeling.chunk_gated_delta_rule is None
        layer.chunk_gated_delta_rule = (modeling.torch_chunk_gated_delta_rule if torch_rule
                                        else modeling.chunk_gated_delta_rule)
    return len(layers)


def step_times(torch, model, ids, warmup: int, repeat: int) -> list[float]:
    """Seconds of each timed forward and backward (loss on the inputs as labels), the GPU synchronised around it."""
    out = []
    for i in range(warmup + repeat):
        torch.cuda.synchronize()
        start = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        torch.cuda.synchronize()
        if i >= warmup:
            out.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=positive, default=2)
    p.add_argument("--seq", type=positive, default=4096)
    p.add_argument("--warmup", type=positive, default=3)
    p.add_argument("--repeat", type=positive, default=10)
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("gdn_fast_path: no GPU visible; the fast path's kernels (causal-conv1d, flash-linear-attention) run on "
              "CUDA only: run it on a GPU host, in the env", file=sys.stderr)
        return 2
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
    from transformers.models.qwen3_next import modeling_qwen3_next as modeling
    if modeling.causal_conv1d_fn is None or modeling.chunk_gated_delta_rule is None:
        print("gdn_fast_path: this env has no fast path to compare (causal-conv1d and flash-linear-attention must both "
              "import): `verlenv build causal-conv1d`", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    config = Qwen3NextConfig(**CONFIG, dtype=torch.bfloat16)
    model = Qwen3NextForCausalLM(config).to("cuda", torch.bfloat16).train()
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), device="cuda")
    results = {}
    for mode in MODES:
        layers = set_mode(model, mode, modeling)
        times = step_times(torch, model, ids, args.warmup, args.repeat)
        results[mode] = {"median_s": statistics.median(times), "min_s": min(times), "steps": len(times)}
        print(f"{mode:>10}: {results[mode]['median_s'] * 1e3:8.1f} ms a step (median of {len(times)}), "
              f"{layers} DeltaNet layers", flush=True)
    fast = results["fast"]["median_s"]
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "config": CONFIG,
              "batch": args.batch, "seq": args.seq, "warmup": args.warmup, "repeat": args.repeat,
              "command": "python benchmarks/gdn_fast_path.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "modes": results, "ratio_to_fast": {m: results[m]["median_s"] / fast for m in MODES}}
    print(json.dumps(report["ratio_to_fast"]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
