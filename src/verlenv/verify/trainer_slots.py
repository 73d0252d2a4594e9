"""How many of verify's trainers run side by side on one GPU host in the fast proof: as many as both the GPU's memory
and the host's hold. Each trainer is a whole verl run (Ray, its workers, vLLM with a fixed KV cache, the actor), so
the host's memory runs out before an 80 GB GPU's does (GPU visit R)."""

from dataclasses import dataclass

from verlenv.native.parallelism import usable_gib
from verlenv.verify.jit_jobs import TRAINER_HOST_GIB

# GPU memory one trainer takes at most, with a margin: measured 5.8 GiB each at peak for glm4-moe, deepseek-v3 and the
# published Qwen3-VL-8B config side by side (visit Q: 17.3 GiB for three) and 3.9 GiB each for the six
# gated-DeltaNet trainers of visit R (23.3 GiB); about twice the larger.
TRAINER_GIB = 12


@dataclass(frozen=True)
class Slots:
    trainers: int
    why: str


def trainers_at_once(families: int, gpu_gib: float, host_available_gib: float | None, thorough: bool) -> Slots:
    """The trainers to run at once: one in --thorough (its timings alone), else the smallest of the families, the
    GPU's memory over TRAINER_GIB and the host's available memory (less the safety margin) over TRAINER_HOST_GIB;
    host_available_gib None where the host cannot say (no /proc/meminfo): the GPU's bound alone."""
    if thorough:
        return Slots(1, "--thorough: one trainer at a time")
    by_gpu = int(gpu_gib // TRAINER_GIB)
    bounds = [f"{families} families", f"{gpu_gib:.0f} GiB of GPU memory / {TRAINER_GIB} GiB = {by_gpu}"]
    limits = [families, by_gpu]
    if host_available_gib is not None:
        by_host = int(max(0.0, usable_gib(host_available_gib)) // TRAINER_HOST_GIB)
        limits.append(by_host)
        bounds.append(f"{host_available_gib:.0f} GiB of host memory available, less the safety margin, "
                      f"/ {TRAINER_HOST_GIB:g} GiB = {by_host}")
    n = max(1, min(limits))
    return Slots(n, f"{n} at once: the smallest of " + "; ".join(bounds))
