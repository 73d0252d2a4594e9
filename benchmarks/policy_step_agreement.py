"""Does one training step of verify's tiny MoE models break their own bf16 agreement? GPU visit V: deepseek-v3 on the
megatron actor passed step 1 of verify's rollout/actor bound (pearson 0.9908) and failed step 2 (0.9808), after its
policy's entropy fell from 4.42 to 2.76 nats in one step; glm4-moe and qwen3-moe barely moved and agreed at 0.9998.
If the tiny model itself, after such a step, were too sensitive for bf16, the check (not the env) would be at fault.

For each family, verify's own tiny random model (built and calibrated as the trainer check builds it) samples
responses after the calibration prompts; then it takes `--steps` Adam steps at the check's learning rate on those
responses, each response weighted +1 or -1 at random (a GRPO-like update of the same size, not verl's loss). Before
and after, it reports the entropy of the model's next-token distribution on its samples, its routed experts' share
(verify/kernels/_routed_experts.py) and the agreement of its bf16 probabilities with its float32 ones on fresh samples
(pearson and mean |p_a - p_b|, as verl computes training/rollout_actor_probs_pearson_corr). Transformers' own
implementation on both sides: what it measures is the model's sensitivity, not Megatron's or vLLM's.

Run in the env, from the repo root (about 20 s a family and seed on the CPU machine):
    PYTHONPATH=src python benchmarks/policy_step_agreement.py --out docs/benchmarks/policy-step-agreement-cpu.json
"""

import argparse
import copy
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import gdn_algorithm_agreement as agreement_tool  # noqa: E402  (its sampling and agreement, and _models on the path)

_models, _routed_experts = agreement_tool._models, agreement_tool._routed_experts
FAMILIES = ("deepseek-v3", "glm4-moe", "qwen3-moe")
CHECK_LR = 1e-4  # the trainer check's actor learning rate (check_verl_trainer.own_overrides)


def response_logp(model, ids, start: int):
    """The model's float32 log-probabilities over the vocabulary at each response position, teacher-forced."""
    return model(input_ids=ids).logits[:, start - 1:-1].float().log_softmax(-1)


def state(model, torch, prompts, length: int, seed: int) -> dict:
    """The model's entropy on its own samples, its routed share, and its bf16 probabilities against its float32 ones;
    with the samples (the update trains on them)."""
    ids = agreement_tool.sample(model, torch, prompts, length, seed)
    start = prompts.shape[1]
    reference = agreement_tool.token_probs(model, torch, ids, start)
    bf16 = agreement_tool.token_probs(copy.deepcopy(model).to(torch.bfloat16), torch, ids, start)
    with torch.no_grad():
        logp = response_logp(model, ids, start)
    share = _routed_experts.share(model, torch, _models.logits)
    return {"entropy": round(-(logp.exp() * logp).sum(-1).mean().item(), 4),
            "routed_influence": None if share is None else round(share, 4),
            "bf16_vs_float32": agreement_tool.agreement(torch, bf16, reference), "ids": ids}


def update(model, torch, ids, start: int, steps: int, lr: float, seed: int) -> None:
    """`steps` Adam steps on the responses, each weighted +1 or -1 (seeded)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    signs = torch.randint(0, 2, (ids.shape[0],), generator=torch.Generator().manual_seed(seed)).float() * 2 - 1
    for _ in range(steps):
        taken = response_logp(model, ids, start).gather(-1, ids[:, start:, None]).squeeze(-1)
        loss = -(signs[:, None] * taken).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def family_result(row: dict, torch, steps: int, lr: float, length: int, seed: int) -> dict:
    torch.manual_seed(seed)
    model = _models.build_model(row, torch)  # float32, calibrated as the check's
    prompts = _models.calibration_ids(torch)
    before = state(model, torch, prompts, length, seed)
    update(model, torch, before.pop("ids"), prompts.shape[1], steps, lr, seed)
    after = state(model, torch, prompts, length, seed)
    after.pop("ids")
    return {"family": row["name"], "seed": seed, "steps": steps, "lr": lr, "before": before, "after": after}


def rows_of(names: list[str]) -> list[dict] | None:
    """The families.toml rows named, as the check gets them; None (after one line on stderr) for an unknown name."""
    from verlenv.catalog import families
    table = families.table()
    if unknown := [n for n in names if n not in table.families]:
        print(f"unknown family {', '.join(unknown)}; valid: {', '.join(table.names())}", file=sys.stderr)
        return None
    return table.rows([table.families[n] for n in names])


def write_record(out: Path, doc: str, tool: str, argv: list[str] | None, torch, results: list[dict]) -> None:
    """The results with what they answer (the tool's first paragraph), the versions and the command that made them."""
    import transformers
    command = f"PYTHONPATH=src python benchmarks/{tool} " + " ".join(argv or sys.argv[1:])
    record = {"what": doc.split("\n\n")[0], "versions": {"torch": torch.__version__,
                                                          "transformers": transformers.__version__},
              "command": command, "results": results}
    out.write_text(json.dumps(record, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", action="append", help=f"a families.toml row (repeatable; default {', '.join(FAMILIES)})")
    p.add_argument("--steps", type=agreement_tool.positive, default=2, help="Adam steps (default 2: the check's two "
                                                                            "mini-batches of step 1)")
    p.add_argument("--lr", type=agreement_tool.positive_number, default=CHECK_LR,
                   help=f"learning rate (default {CHECK_LR:g})")
    p.add_argument("--length", type=agreement_tool.positive, default=48, help="response tokens after each prompt")
    p.add_argument("--seeds", type=agreement_tool.positive, default=2, help="seeds first-seed..first-seed+N-1")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    import torch

    rows = rows_of(args.family or list(FAMILIES))
    if rows is None:
        return 2
    results = []
    for row in rows:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            r = family_result(row, torch, args.steps, args.lr, args.length, seed)
            results.append(r)
            b, a = r["before"], r["after"]
            print(f"{r['family']:12} seed {seed}: entropy {b['entropy']:.3f} -> {a['entropy']:.3f}; bf16 vs float32 "
                  f"pearson {b['bf16_vs_float32']['pearson']:.5f} -> {a['bf16_vs_float32']['pearson']:.5f}", flush=True)
    if args.out:
        write_record(args.out, __doc__, "policy_step_agreement.py", argv, torch, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
