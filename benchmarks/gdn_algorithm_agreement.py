"""Why do the gated-DeltaNet MoE families fail verify's rollout/actor agreement? GPU visit R: qwen3.5 passed the
bound (pearson 0.995), qwen3.5-moe and qwen3-next did not (0.957-0.989), and the attention-only families agree at
0.992-0.9998. Two causes are in question: the DeltaNet algorithm (the trainer runs flash-linear-attention's chunked
one; vLLM decodes with a recurrent one), and MoE routing (a small difference in the hidden state flips a token's
top-k experts). This measures both in one process.

For each family, verify's own tiny random model (built as the trainer check builds it) samples response tokens after
random prompts. Then each response token's probability is computed, teacher-forced, in these ways:
- `chunk`: the DeltaNet layers on the chunked algorithm, in bf16 (what verl's actor runs);
- `recurrent`: on the recurrent algorithm, in bf16 (what vLLM decodes with);
- `float32`: chunked, in float32 (the scale of ordinary bf16 rounding, for every family).

An MoE family is measured again with every expert selected (num_experts_per_tok = the number of experts), which
leaves routing no choice to flip; and `mixed_up`: chunked, in bf16, with every routed expert's output taken through
the next expert's down projection, as a broken expert kernel would give it (how far below the bound such a break
lands: the check's power to see it). Its routed experts are calibrated as the trainer check's are (families.toml
routed_influence; --routed-influence measures another share, `none` the random init's).

It prints the pearson correlation and the mean |p_a - p_b| of `chunk` against the others. These are computed as verl
computes training/rollout_actor_probs_pearson_corr and training/rollout_probs_diff_mean.

On the GPU the algorithms are flash-linear-attention's kernels (chunk_gated_delta_rule,
fused_recurrent_gated_delta_rule), as transformers loads them. With --device cpu, transformers' torch versions of both
run instead. They compute in float32 inside and agree closely, so on CPU the comparison that counts is `float32`,
with and without routing's choice.

Run in the env, from the repo root (a minute on a GPU, 30 s on the CPU machine):
    PYTHONPATH=src python benchmarks/gdn_algorithm_agreement.py --device cuda \
        --out docs/benchmarks/gdn-algorithm-agreement-<gpu>.json
"""

import argparse
import copy
import inspect
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src" / "verlenv" / "verify" / "kernels"))

import _models  # noqa: E402  (the trainer check's model builder, standalone in the env)
import _routed_experts  # noqa: E402

FAMILIES = ("qwen3.5", "qwen3.5-moe", "qwen3-next", "qwen3-moe", "glm4-moe", "deepseek-v3")


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give a whole number of at least 1")
    return value


def positive_number(text: str, also: str = "") -> float:
    """A positive float from the command line; `also` names what else the option takes, in its refusal."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: give a positive number{also}")
    return value


def share_arg(text: str) -> float | None:
    return None if text == "none" else positive_number(text, ", or none (the random init's share)")


def deltanet_layers(model) -> list:
    return [m for m in model.modules() if hasattr(m, "chunk_gated_delta_rule")]


def as_chunked_call(recurrent):
    """The recurrent function, callable as the layer calls its chunked one: the keyword arguments it does not take
    (cu_seqlens, None without packed sequences) are dropped, and refused if they carry a value."""
    accepted = set(inspect.signature(recurrent).parameters)

    def call(*args, **kwargs):
        extra = {k: v for k, v in kwargs.items() if k not in accepted}
        if any(v is not None for v in extra.values()):
            raise ValueError(f"the recurrent algorithm takes no {sorted(extra)}")
        return recurrent(*args, **{k: v for k, v in kwargs.items() if k in accepted})
    return call


def on_fast_paths(model) -> None:
    """Every DeltaNet layer back on the kernels transformers gives it when the packages import (the trainer check
    builds the model on CPU, on torch's paths; the trainer loads it with these): causal-conv1d's convolution and
    flash-linear-attention's two algorithms, where the env has them."""
    for layer in deltanet_layers(model):
        modeling = sys.modules[type(layer).__module__]
        layer.causal_conv1d_fn = getattr(modeling, "causal_conv1d_fn", None)
        layer.chunk_gated_delta_rule = (getattr(modeling, "chunk_gated_delta_rule", None)
                                        or modeling.torch_chunk_gated_delta_rule)
        layer.recurrent_gated_delta_rule = (getattr(modeling, "fused_recurrent_gated_delta_rule", None)
                                            or modeling.torch_recurrent_gated_delta_rule)


def set_algorithm(model, algorithm: str, chunked: dict) -> None:
    """Every DeltaNet layer on `algorithm` (chunk or recurrent); `chunked` keeps each layer's own chunked function."""
    for layer in deltanet_layers(model):
        chunked.setdefault(id(layer), layer.chunk_gated_delta_rule)
        layer.chunk_gated_delta_rule = (chunked[id(layer)] if algorithm == "chunk"
                                        else as_chunked_call(layer.recurrent_gated_delta_rule))


def sample(model, torch, prompts, length: int, seed: int):
    """`length` response tokens after each prompt, sampled from the model's own distribution (no cache: every step
    is a whole forward, on the layer's chunked algorithm)."""
    gen = torch.Generator(device=prompts.device).manual_seed(seed)
    ids = prompts
    with torch.no_grad():
        for _ in range(length):
            probs = model(input_ids=ids).logits[:, -1, :].float().softmax(-1)
            ids = torch.cat([ids, torch.multinomial(probs, 1, generator=gen)], dim=1)
    return ids


def token_probs(model, torch, ids, prompt_len: int):
    """Each response token's probability under the model, teacher-forced (float32 softmax)."""
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, prompt_len - 1:-1, :].float()
    return logits.softmax(-1).gather(-1, ids[:, prompt_len:, None]).squeeze(-1).flatten()


def agreement(torch, a, b) -> dict:
    pearson = torch.corrcoef(torch.stack([a.double(), b.double()]))[0, 1].item()
    return {"pearson": round(pearson, 6), "probs_diff_mean": round((a - b).abs().mean().item(), 6),
            "probs_diff_max": round((a - b).abs().max().item(), 6)}


def all_experts(row: dict) -> dict | None:
    """The family's row with every expert selected for every token; None for a family without routed experts."""
    config = copy.deepcopy(row["config"])
    text = config.get("text_config", config)
    experts = text.get("num_experts", text.get("n_routed_experts", text.get("num_local_experts")))
    if not experts or "num_experts_per_tok" not in text:
        return None
    text["num_experts_per_tok"] = experts
    return {**row, "config": config}


def family_result(row: dict, torch, device: str, length: int, seed: int) -> dict:
    model = _models.build_model(row, torch)  # float32, on CPU, DeltaNet layers on transformers' torch paths
    layers = len(deltanet_layers(model))
    share = _routed_experts.share(model, torch, _models.logits)
    if device != "cpu":
        on_fast_paths(model)
    model = model.to(device)
    prompts = _models.calibration_ids(torch).to(device)
    ids = sample(model, torch, prompts, length, seed)
    chunked: dict = {}
    out = {"family": row["name"], "model_class": row["model_class"], "deltanet_layers": layers,
           "routed_influence": None if share is None else round(share, 4),
           "tokens": int(ids[:, prompts.shape[1]:].numel())}
    reference = token_probs(model, torch, ids, prompts.shape[1])
    model = model.to(torch.bfloat16)
    chunk = token_probs(model, torch, ids, prompts.shape[1])
    out["chunk_vs_float32"] = agreement(torch, chunk, reference)
    if layers:
        set_algorithm(model, "recurrent", chunked)
        out["chunk_vs_recurrent"] = agreement(torch, chunk, token_probs(model, torch, ids, prompts.shape[1]))
        set_algorithm(model, "chunk", chunked)
    if _routed_experts.down_projections(model):
        _routed_experts.mix_up(model, torch)
        out["chunk_vs_mixed_up"] = agreement(torch, token_probs(model, torch, ids, prompts.shape[1]), reference)
    return out


def summary(r: dict) -> str:
    name = r["family"] + (" (every expert)" if r.get("experts") else "") + f", seed {r['seed']}"
    line = f"{name:36} {r['tokens']} tokens: chunk vs float32 pearson {r['chunk_vs_float32']['pearson']:.4f}"
    if "chunk_vs_recurrent" in r:
        line += f"; chunk vs recurrent pearson {r['chunk_vs_recurrent']['pearson']:.4f}"
    if "chunk_vs_mixed_up" in r:
        line += (f"; experts mixed up pearson {r['chunk_vs_mixed_up']['pearson']:.4f} (share "
                 f"{r['routed_influence']:.3f})")
    return line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", action="append", help=f"a families.toml row (repeatable; default {', '.join(FAMILIES)})")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--length", type=positive, default=64, help="response tokens sampled after each prompt")
    p.add_argument("--seeds", type=positive, default=3, help="sampling seeds 0..N-1, each measured on its own")
    p.add_argument("--first-seed", type=int, default=0, help="the first sampling seed (default 0)")
    p.add_argument("--routed-influence", type=share_arg, default=False,
                   help="the routed experts' share of the logits to calibrate to (default: families.toml's); `none` "
                        "keeps the random init's")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    import torch

    from verlenv.catalog import families
    table = families.table()
    names = args.family or list(FAMILIES)
    unknown = [n for n in names if n not in table.families]
    if unknown:
        print(f"unknown family {', '.join(unknown)}; valid: {', '.join(table.names())}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: no GPU visible; give --device cpu to check the tool on transformers' torch paths",
              file=sys.stderr)
        return 2
    results = []
    for row in table.rows([table.families[n] for n in names]):
        if args.routed_influence is not False:
            row = {**row, "routed_influence": args.routed_influence}
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            results.append({**family_result(row, torch, args.device, args.length, seed), "seed": seed})
            print(summary(results[-1]), flush=True)
            every = all_experts(row)
            if every:
                results.append({**family_result(every, torch, args.device, args.length, seed), "seed": seed,
                                "experts": "all selected"})
                print(summary(results[-1]), flush=True)
    if args.out:
        import transformers
        command = "PYTHONPATH=src python benchmarks/gdn_algorithm_agreement.py " + " ".join(argv or sys.argv[1:])
        record = {"what": __doc__.split("\n\n")[0], "device": args.device,
                  "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
                  "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                  "command": command, "results": results}
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
