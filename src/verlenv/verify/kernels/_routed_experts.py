"""How much a tiny random MoE model's routed experts move its logits, and a calibration of that share: the trainer
check's MoE models are built so that their routed experts' share is the table's `routed_influence` (families.toml
says why and what was measured).

The share is measured as verify would see a broken expert kernel: every routed expert's output taken through the
next expert's down projection (the experts mixed up), then the std of the logits' change over the std of the logits,
on the calibration prompts. Too large a share, and bf16 rounding alone flips enough top-k choices to take the
rollout/actor agreement under verify's bound (the hybrid MoE families on GPU visit R); too small, and a broken expert
path would pass it.

Standard library at import (it runs in the env under test); torch is passed in.
"""

from __future__ import annotations

# Scale steps towards the target: the share grows at most linearly with the scale (nearly so while it is small;
# measured on CPU: 1.18, 0.88, 0.53 at scales 1, 0.5, 0.25 for qwen3.5-moe), so a few steps of scale *= target / share
# land within TOLERANCE of it.
STEPS = 6
TOLERANCE = 0.05


def down_projections(model) -> list[list[tuple]]:
    """Each MoE layer's routed experts: one tuple per expert of its down projection's tensors (the weight, and the
    bias where it has one). transformers 5 packs a layer's experts into 3-D parameters (`experts.down_proj[e]`);
    transformers 4 keeps a module list of expert MLPs (`experts[e].down_proj`, Mixtral's `experts[e].w2`). Shared
    experts are not routed and are not named `experts`: they are left out."""
    layers = []
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] != "experts":
            continue
        packed = getattr(module, "down_proj", None)
        if packed is not None and getattr(packed, "dim", lambda: 0)() == 3:
            bias = getattr(module, "down_proj_bias", None)
            layers.append([(packed[e],) + ((bias[e],) if bias is not None else ()) for e in range(packed.shape[0])])
            continue
        experts = [getattr(m, "down_proj", None) or getattr(m, "w2", None) for m in _children(module)]
        if experts and all(hasattr(e, "weight") for e in experts):
            layers.append([(e.weight,) + ((e.bias,) if e.bias is not None else ()) for e in experts])
    return layers


def _children(module) -> list:
    try:
        return list(module)
    except TypeError:  # not a module list
        return []


def mix_up(model, torch, shift: int = 1) -> None:
    """Expert e's down projection becomes expert e-shift's, in every MoE layer (shift -1 undoes shift 1)."""
    with torch.no_grad():
        for experts in down_projections(model):
            kept = [tuple(t.clone() for t in tensors) for tensors in experts]
            for e, tensors in enumerate(experts):
                for t, value in zip(tensors, kept[(e - shift) % len(kept)]):
                    t.copy_(value)


def share(model, torch, logits) -> float | None:
    """The routed experts' share of the logits (see above); None for a model without routed experts. `logits` is
    the builder's function of the model (on the calibration prompts)."""
    if not down_projections(model):
        return None
    base = logits(model, torch)
    mix_up(model, torch)
    try:
        moved = logits(model, torch)
    finally:
        mix_up(model, torch, shift=-1)
    return ((moved - base).std() / base.std()).item()


def scale(model, factor: float, torch) -> None:
    with torch.no_grad():
        for experts in down_projections(model):
            for tensors in experts:
                for t in tensors:
                    t.mul_(factor)


def calibrate(model, target: float | None, torch, logits) -> float | None:
    """Scale every routed expert's output alike until their share is within TOLERANCE of `target` (None: as drawn);
    the share reached (None without routed experts). One line if it cannot be reached (a share of 0: the experts
    never move the logits)."""
    reached = share(model, torch, logits)
    if target is None:
        return reached
    for _ in range(STEPS):
        if reached is None or abs(reached - target) <= TOLERANCE * target:
            return reached
        if not reached > 0:
            raise ValueError(f"{type(model).__name__}: its routed experts do not move the logits (share {reached}); "
                             "cannot calibrate them")
        scale(model, target / reached, torch)
        reached = share(model, torch, logits)
    if abs(reached - target) > TOLERANCE * target:
        raise ValueError(f"{type(model).__name__}: the routed experts' share of the logits reached {reached:.3f} in "
                         f"{STEPS} steps, not {target} (within {TOLERANCE:.0%})")
    return reached
