"""Run by tests/verify/test_routed_experts.py inside the default env (torch, transformers): every family row it is
given built as the trainer check builds it (kernels/_models.py build_model): with the table's routed_influence, with
another share (OTHER: one no family's experts have as drawn, so the calibration must scale them) and as drawn
(routed_influence None); and what the calibration did: the shares reached, the factor each tensor of the model was
scaled by on the way to OTHER, and whether mixing the experts up and back is the identity. Also a layout of
transformers 4 (a module list of expert MLPs, Mixtral's w2), which the env's transformers 5 no longer builds: a
stand-in module tree of that layout, named as such.

python routed_experts_in_env.py KERNELS ROWS.json OTHER OUT.json
"""

import json
import sys

KERNELS, ROWS, OTHER, OUT = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
sys.path.insert(0, KERNELS)  # as when the check runs: its folder first
import _models  # noqa: E402
import _routed_experts  # noqa: E402

import torch  # noqa: E402

torch.set_num_threads(2)


def factors(calibrated, drawn) -> dict:
    """{parameter name: its calibrated / drawn ratio} for each parameter the calibration changed (1 where equal)."""
    out = {}
    mine = dict(calibrated.named_parameters())
    for name, value in drawn.named_parameters():
        a, b = mine[name].detach(), value.detach()
        if torch.equal(a, b):
            continue
        ratio = a[b != 0] / b[b != 0]
        out[name] = [ratio.min().item(), ratio.max().item()]
    return out


def mix_up_round_trip(model) -> dict:
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    _routed_experts.mix_up(model, torch)
    changed = sorted(n for n, p in model.named_parameters() if not torch.equal(p, before[n]))
    _routed_experts.mix_up(model, torch, shift=-1)
    restored = all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    return {"changed": changed, "restored": restored}


def zeroed_experts(row) -> str:
    model = _models.build_model({**row, "routed_influence": None}, torch)
    _routed_experts.scale(model, 0.0, torch)
    try:
        _routed_experts.calibrate(model, 0.4, torch, _models.logits)
    except ValueError as e:
        return str(e)
    return "no error"


class StandInExpert(torch.nn.Module):
    """A stand-in of a transformers 4 expert MLP (Mixtral's names: w1, w3 in, w2 out)."""

    def __init__(self, width: int, inner: int, bias: bool):
        super().__init__()
        self.w1 = torch.nn.Linear(width, inner, bias=False)
        self.w2 = torch.nn.Linear(inner, width, bias=bias)


def module_list_layout() -> dict:
    torch.manual_seed(0)
    block = torch.nn.Module()
    block.experts = torch.nn.ModuleList(StandInExpert(8, 4, bias=True) for _ in range(3))
    found = _routed_experts.down_projections(block)
    before = [e.w2.weight.detach().clone() for e in block.experts]
    _routed_experts.mix_up(block, torch)
    moved = all(torch.equal(block.experts[e].w2.weight, before[(e - 1) % 3]) for e in range(3))
    return {"layers": len(found), "tensors_per_expert": [len(t) for t in found[0]], "moved_by_one": moved}


out = {"module_list": module_list_layout()}
for row in json.loads(open(ROWS).read()):
    calibrated = _models.build_model(row, torch)
    other = _models.build_model({**row, "routed_influence": OTHER}, torch)
    drawn = _models.build_model({**row, "routed_influence": None}, torch)
    result = {"share": _routed_experts.share(calibrated, torch, _models.logits),
              "other_share": _routed_experts.share(other, torch, _models.logits),
              "drawn_share": _routed_experts.share(drawn, torch, _models.logits),
              "factors": factors(other, drawn), "round_trip": mix_up_round_trip(calibrated)}
    if result["share"] is not None:
        result["zeroed"] = zeroed_experts(row)
    out[row["name"]] = result
with open(OUT, "w") as f:
    json.dump(out, f)
