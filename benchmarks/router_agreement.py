"""Why does deepseek-v3 agree least of the MoE families between the megatron actor and vLLM's rollout? GPU visits Q,
S, V and W: before any update (step 1), deepseek-v3 agreed at pearson 0.9908-0.9943 on the megatron actor but
0.9982-0.9987 on the fsdp actor (visit M), and glm4-moe at 0.9973-0.9997, qwen3-moe at 0.9994-0.9998 on megatron.
Its published config, shrunk by `--model-config`, agreed at 0.9998 on megatron (visit K). Two differences between the
implementations are measured here, each alone:
- `groups`: how a group of experts is scored in group-limited routing. Transformers' DeepseekV3 and vLLM 0.24.0
  (grouped_topk_router.py) score a group by the sum of its top 2 experts' biased scores; megatron-core 0.18.2
  (moe_utils.group_limited_topk) by the sum of its top (num_experts_per_tok // topk_group). For DeepSeek-V3 (8 // 4) and
  the shrunk published config (2 // 1) both are 2; for the family row of visits K-W (2 of 8 experts, from 2 of 4
  groups) megatron-core takes 1.
- `precision`: the router's logits in bf16 (vLLM's deepseek_v2.py GateLinear without an out_dtype, at these sizes) or
  in float32 (transformers; Megatron-Bridge's moe_router_dtype fp32; vLLM's glm4_moe.py).

For each family, verify's own tiny model (built and calibrated as the trainer check builds it) samples responses
after the calibration prompts. Then each response token's probability is computed, teacher-forced, by the model in
bf16: as transformers routes it, with megatron-core's group score, and with bf16 router logits. It prints their
agreement with the first (and the first's with float32) as verl computes training/rollout_actor_probs_pearson_corr,
before and after `--steps` Adam steps (policy_step_agreement.py's update: the check's step 2 follows an update).
Transformers' own implementation throughout, with one rule changed at a time: it isolates each rule, and does not
run vLLM's or Megatron's kernels. `--set KEY=VALUE` changes a key of the family's config (an earlier row).

Run in the env, from the repo root (about 30 s a family and seed on the CPU machine):
    PYTHONPATH=src python benchmarks/router_agreement.py --seeds 3 --first-seed 2 \
        --out docs/benchmarks/router-agreement-cpu.json
"""

import argparse
import contextlib
import copy
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import gdn_algorithm_agreement as agreement_tool  # noqa: E402  (sampling, agreement, _models on the path)
import policy_step_agreement as step_tool  # noqa: E402  (the update)

_models = agreement_tool._models
FAMILIES = ("deepseek-v3", "glm4-moe")
# Transformers' router modules that compute their logits in float32 (F.linear on float32 input and weight), and the
# MoE modules whose route_tokens_to_experts does group-limited routing by sigmoid scores.
ROUTERS = ("DeepseekV3TopkRouter", "Glm4MoeTopkRouter")
GROUPED = ("DeepseekV3MoE", "Glm4MoeMoE")


def route(moe, torch, router_logits, per_group: int):
    """Transformers' route_tokens_to_experts (DeepseekV3MoE, Glm4MoeMoE) with a group scored by the sum of its top
    `per_group` biased scores (transformers: 2; megatron-core: num_experts_per_tok // topk_group)."""
    scores = router_logits.sigmoid()
    for_choice = scores + moe.gate.e_score_correction_bias
    per = moe.n_routed_experts // moe.n_group
    group_scores = for_choice.view(-1, moe.n_group, per).topk(per_group, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=moe.topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(-1, moe.n_group, per).reshape(-1, moe.n_routed_experts)
    topk_indices = torch.topk(for_choice.masked_fill(~score_mask.bool(), float("-inf")), k=moe.top_k, dim=-1,
                              sorted=False)[1]
    topk_weights = scores.gather(1, topk_indices)
    if moe.norm_topk_prob:
        topk_weights = topk_weights / (topk_weights.sum(dim=-1, keepdim=True) + 1e-20)
    return topk_indices, topk_weights * moe.routed_scaling_factor


@contextlib.contextmanager
def group_scores_by(model, torch, rule: str):
    """While open, every grouped MoE layer scores its groups by `rule`: "transformers" (top 2, through this file's
    copy of its routing: a check of the copy) or "megatron" (top num_experts_per_tok // topk_group)."""
    from verlenv.verify import group_routing  # the rule verify's family-routing check judges by
    patched = [m for m in model.modules() if type(m).__name__ in GROUPED]
    if not patched:
        raise SystemExit(f"no MoE layer of {', '.join(GROUPED)} in {type(model).__name__}")
    for moe in patched:
        per_group = 2 if rule == "transformers" else group_routing.megatron_group_top(moe.top_k, moe.topk_group)
        moe.route_tokens_to_experts = lambda logits, moe=moe, k=per_group: route(moe, torch, logits, k)
    try:
        yield
    finally:
        for moe in patched:
            del moe.route_tokens_to_experts  # the class's own again


@contextlib.contextmanager
def router_logits_in(model, torch, dtype):
    """While open, every float32 router of the model computes its logits in `dtype` (input, weight and output rounded
    to it, then back to float32), as vLLM's bf16 gate gives them; the rest of the model is untouched."""
    real = torch.nn.functional.linear
    inside = []

    def linear(x, weight, bias=None):
        if inside and x.dtype == torch.float32:
            out = real(x.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype))
            return out.to(torch.float32)
        return real(x, weight, bias)

    def enter(*_):
        inside.append(True)

    def leave(*_):  # returns None: the router's output stands
        inside.pop()

    hooks = []
    for module in model.modules():
        if type(module).__name__ in ROUTERS:
            hooks += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    if not hooks:
        raise SystemExit(f"no router of {', '.join(ROUTERS)} in {type(model).__name__}")
    torch.nn.functional.linear = linear
    try:
        yield
    finally:
        torch.nn.functional.linear = real
        for hook in hooks:
            hook.remove()


def measure(model, torch, prompts, length: int, seed: int) -> dict:
    """The bf16 model's probabilities as transformers routes, against float32 and against each changed rule; with the
    samples (the update trains on them)."""
    ids = agreement_tool.sample(model, torch, prompts, length, seed)
    start = prompts.shape[1]
    reference = agreement_tool.token_probs(model, torch, ids, start)
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    actor = agreement_tool.token_probs(bf16, torch, ids, start)
    out = {"transformers_vs_float32": agreement_tool.agreement(torch, actor, reference)}
    for name, changed in (("copy_vs_transformers", group_scores_by(bf16, torch, "transformers")),
                          ("megatron_groups_vs_transformers", group_scores_by(bf16, torch, "megatron")),
                          ("bf16_router_vs_transformers", router_logits_in(bf16, torch, torch.bfloat16))):
        with changed:
            out[name] = agreement_tool.agreement(torch, agreement_tool.token_probs(bf16, torch, ids, start), actor)
    return {**out, "ids": ids}


def family_result(row: dict, torch, steps: int, length: int, seed: int) -> dict:
    torch.manual_seed(seed)
    model = _models.build_model(row, torch)  # float32, calibrated as the check's
    prompts = _models.calibration_ids(torch)
    before = measure(model, torch, prompts, length, seed)
    step_tool.update(model, torch, before.pop("ids"), prompts.shape[1], steps, step_tool.CHECK_LR, seed)
    after = measure(model, torch, prompts, length, seed)
    after.pop("ids")
    groups = {k: row["config"].get(k) for k in ("n_routed_experts", "n_group", "topk_group", "num_experts_per_tok")}
    return {"family": row["name"], "seed": seed, "steps": steps, "routing": groups, "before": before, "after": after}


def setting(text: str) -> tuple[str, int]:
    key, sep, value = text.partition("=")
    if not sep or not key or not value.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: give KEY=N, a config key and a whole number (n_group=4)")
    return key, int(value)


def line(r: dict) -> str:
    b, a = r["before"], r["after"]
    pair = lambda name: f"{b[name]['pearson']:.5f} -> {a[name]['pearson']:.5f}"  # noqa: E731
    return (f"{r['family']:12} seed {r['seed']} {r['routing']}: megatron groups "
            f"{pair('megatron_groups_vs_transformers')}; bf16 router {pair('bf16_router_vs_transformers')}; "
            f"float32 {pair('transformers_vs_float32')}; copy {pair('copy_vs_transformers')}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", action="append", help=f"a families.toml row (repeatable; default {', '.join(FAMILIES)})")
    p.add_argument("--set", type=setting, action="append", default=[], metavar="KEY=N",
                   help="a key of each family's config set to N (repeatable), e.g. the row's earlier n_group=4")
    p.add_argument("--steps", type=agreement_tool.positive, default=2, help="Adam steps between the two measures")
    p.add_argument("--length", type=agreement_tool.positive, default=48, help="response tokens after each prompt")
    p.add_argument("--seeds", type=agreement_tool.positive, default=2, help="seeds first-seed..first-seed+N-1")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    import torch

    rows = step_tool.rows_of(args.family or list(FAMILIES))
    if rows is None:
        return 2
    results = []
    for row in rows:
        row = {**row, "config": {**row["config"], **dict(args.set)}}
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            results.append(family_result(row, torch, args.steps, args.length, seed))
            print(line(results[-1]), flush=True)
    if args.out:
        step_tool.write_record(args.out, __doc__, "router_agreement.py", argv, torch, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
