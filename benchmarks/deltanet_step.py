"""Forward+backward time of a Qwen3.5 / Qwen3-Next model on the gated-DeltaNet fast path and on its fallbacks, in one
run on one GPU, so the ratio is measured, not assumed (issue 54).

The model: a published config (tests/data/model-configs/published.py writes them), its text part cut to --layers
layers (the published layer_types pattern kept: linear-attention layers with a full-attention one every
`full_attention_interval`), MoE experts capped at --experts, random bf16 weights, sdpa for the full-attention layers.
The modes are set per GatedDeltaNet layer instance; no installed package is changed:
  fast           as the env runs it: causal-conv1d's kernel and flash-linear-attention's chunked delta rule
  conv-fallback  the layer's causal_conv1d_fn set to None: what transformers runs when causal-conv1d is missing
                 (the env before causal-conv1d was added): the short convolution on torch, fla's rule still used
  torch          also the delta rule on transformers' own torch reference (neither package installed)
The modes are timed in turns (A B C A B C ...), so a load on the host slows each alike; each mode's loss on the same
batch is printed beside its time, and the losses must agree (the same model, three code paths).

    python benchmarks/deltanet_step.py /tmp/published/Qwen3.5-27B/config.json --layers 8 --seq 4096 --out x.json
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

MODES = ("fast", "conv-fallback", "torch")


def text_config(path: Path, layers: int, experts: int):
    """The published config's text model, `layers` deep with its own layer pattern, experts capped."""
    import transformers

    values = json.loads(path.read_text())
    text = values.get("text_config", values)
    kind = text["model_type"]
    config = transformers.AutoConfig.for_model(kind, **{k: v for k, v in text.items() if k != "model_type"})
    interval = getattr(config, "full_attention_interval", 4)
    config.num_hidden_layers = layers
    config.layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    for key in ("num_experts", "n_routed_experts"):
        if getattr(config, key, None):
            setattr(config, key, min(getattr(config, key), experts))
            config.num_experts_per_tok = min(config.num_experts_per_tok, getattr(config, key))
    if hasattr(config, "mlp_only_layers"):
        config.mlp_only_layers = []
    config._attn_implementation = "sdpa"
    return config


def deltanet_layers(model) -> list:
    return [m for m in model.modules() if type(m).__name__.endswith("GatedDeltaNet")]


def set_mode(layers: list, mode: str, kernels: dict) -> None:
    """Point each layer at the mode's functions; `kernels` holds what the layers had at construction (the fast ones)."""
    for layer in layers:
        torch_rule = sys.modules[type(layer).__module__].torch_chunk_gated_delta_rule
        layer.causal_conv1d_fn = None if mode != "fast" else kernels["conv"]
        layer.chunk_gated_delta_rule = torch_rule if mode == "torch" else kernels["rule"]


def step(model, batch) -> float:
    loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return loss.item()


def measure(path: Path, args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = text_config(path, args.layers, args.experts)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    layers = deltanet_layers(model)
    if not layers or layers[0].causal_conv1d_fn is None:
        raise SystemExit(f"{path}: no gated-DeltaNet layer on the fast path here (causal-conv1d or fla missing)")
    kernels = {"conv": layers[0].causal_conv1d_fn, "rule": layers[0].chunk_gated_delta_rule}
    batch = torch.randint(0, config.vocab_size, (args.batch, args.seq), device="cuda")
    times: dict[str, list[float]] = {m: [] for m in MODES}
    losses: dict[str, float] = {}
    for turn in range(args.warmup + args.repeat):
        for mode in MODES:
            set_mode(layers, mode, kernels)
            torch.cuda.synchronize()
            start = time.perf_counter()
            losses[mode] = step(model, batch)
            torch.cuda.synchronize()
            if turn >= args.warmup:
                times[mode].append(time.perf_counter() - start)
    median = {m: statistics.median(t) for m, t in times.items()}
    return {"config": path.parent.name, "model_type": config.model_type, "layers": config.layer_types,
            "params": sum(p.numel() for p in model.parameters()), "batch": args.batch, "seq": args.seq,
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "times_s": times,
            "median_s": median, "loss": losses,
            "ratio_to_fast": {m: round(median[m] / median["fast"], 3) for m in MODES}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("configs", nargs="+", type=Path, help="published config.json files")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--experts", type=int, default=64, help="cap on routed experts (memory)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--warmup", type=int, default=2, help="turns not timed (Triton autotuning, allocator)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    results = []
    for path in args.configs:
        r = measure(path, args)
        results.append(r)
        print(f"{r['config']}: {len(r['layers'])} layers, {r['params'] / 1e9:.2f} B params, {r['gpu']}, "
              f"batch {r['batch']} x {r['seq']}")
        for mode in MODES:
            print(f"  {mode:14s} median {r['median_s'][mode]:.3f} s  ratio {r['ratio_to_fast'][mode]:.2f}  "
                  f"loss {r['loss'][mode]:.4f}")
        sys.modules["torch"].cuda.empty_cache()  # measure() imported it; free the model before the next
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
