"""Shared by the kernel check scripts: arguments, thresholds, the result file, timing and error metrics.

It runs inside the environment under test, so it needs only the standard library; torch is passed in
by the scripts once they know it imports.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
import traceback

# This folder is sys.path[0] of a script, and of every child it spawns (multiprocessing passes sys.path on), so
# a spawned child re-running the script finds _common. Nothing here may be named like a package: the scripts
# are check_<what>.py (tests/verify/test_kernel_scripts.py fails on a name that an env or the catalog imports).

# Defaults for the thresholds a GPU profile (gpus.toml) may override.
DEFAULT_THRESHOLDS = {
    "fp32_max_rel_err": 1e-4,
    "fp16_max_rel_err": 2e-3,
    "bf16_max_rel_err": 1e-2,
    "fp8_max_rel_err": 1e-1,
    "flash_attn_min_ratio_vs_sdpa": 1.0,
    "flash_attn_min_tflops": 100.0,
}

NO_CUDA = "no CUDA device"


class Skipped(Exception):
    """A check that cannot run here (no fp8 on this GPU, one GPU only...): its message is the reason."""


class Failed(Exception):
    """A check that ran and found a problem; carries the numbers it measured."""

    def __init__(self, reason: str, numbers: dict | None = None, known_issue: dict | None = None):
        super().__init__(reason)
        self.numbers = numbers or {}
        # An upstream failure this one is (url, fix, summary): verify reports it with the link, not against the env.
        self.known_issue = known_issue


class ProfileError(ValueError):
    pass


class Profile:
    def __init__(self, key: str, arch: str, fp8: bool, thresholds: dict, gpu_count: int | None = None,
                 variant: str = "fsdp", thorough: bool = False, rollout_tp: int = 1, actor_tp: int = 1,
                 beside: tuple[str, ...] = (), trainer: dict | None = None, runs_cubins: tuple[str, ...] = (),
                 jit_caches: dict | None = None):
        self.key, self.arch, self.fp8, self.thresholds = key, arch, fp8, thresholds
        # The cubin names that run on this profile's GPU (verlenv's arch-family rules: sm_100 and sm_103a on a B300);
        # by default the arch's own.
        sm = arch.replace(".", "")
        self.runs_cubins = tuple(runs_cubins) or (f"sm_{sm}", f"sm_{sm}a")
        # How many GPUs the run gives the script (None: all it sees), and the env's variant (a stacks.toml name).
        self.gpu_count, self.variant = gpu_count, variant
        # What verl's trainer check runs: the variant's actor and rollout rows (data/backends.toml), the env's
        # overrides, the family rows (data/families.toml) and how many trainers run at once in the fast proof.
        self.trainer = trainer or {}
        # thorough: the production path (verl's and vLLM's defaults: CUDA graphs, torch.compile), else the fast
        # proof; the tensor-parallel sizes of verl's rollout and Megatron actor in the trainer check.
        self.thorough, self.rollout_tp, self.actor_tp = thorough, rollout_tp, actor_tp
        # The scripts running at the same time on the same GPUs (e.g. "verl_trainer"): a throughput measured now
        # shares the GPU.
        self.beside = beside
        # Where each JIT compiler caches: data/packages.toml's [jit_caches] rows by name.
        self.jit_caches = jit_caches or {}

    def threshold(self, name: str) -> float:
        return float(self.thresholds.get(name, DEFAULT_THRESHOLDS[name]))

    def optional_threshold(self, name: str) -> float | None:
        """A threshold with no default: None when the profile does not set it."""
        value = self.thresholds.get(name)
        return None if value is None else float(value)

    def max_rel_err(self, dtype_name: str) -> float:
        return self.threshold(f"{dtype_name}_max_rel_err")


def parse_profile(text: str) -> Profile:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileError(f"--profile is not valid JSON ({e.msg} at char {e.pos})") from None
    if not isinstance(data, dict):
        raise ProfileError("--profile must be a JSON object with key, arch, fp8 and thresholds")
    missing = [k for k in ("key", "arch", "fp8") if k not in data]
    if missing:
        raise ProfileError(f"--profile lacks {', '.join(missing)}; it needs key, arch, fp8 and thresholds")
    key, arch, fp8 = data["key"], data["arch"], data["fp8"]
    if not isinstance(key, str) or not key:
        raise ProfileError(f"--profile key must be a non-empty string, not {key!r}")
    if not isinstance(arch, str) or _parse_arch(arch) is None:
        raise ProfileError(f"--profile arch must be a compute capability like \"9.0\", not {arch!r}")
    if not isinstance(fp8, bool):
        raise ProfileError(f"--profile fp8 must be true or false, not {fp8!r}")
    thresholds = data.get("thresholds", {})
    if not isinstance(thresholds, dict):
        raise ProfileError("--profile thresholds must be a JSON object of numbers")
    for name, value in thresholds.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ProfileError(f"--profile threshold {name} must be a finite number, not {value!r}")
    gpu_count, variant = data.get("gpu_count"), data.get("variant", "fsdp")
    if gpu_count is not None and (isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count < 1):
        raise ProfileError(f"--profile gpu_count must be a positive integer, not {gpu_count!r}")
    if not isinstance(variant, str) or not variant:
        raise ProfileError(f"--profile variant must be a variant's name (a non-empty string), not {variant!r}")
    thorough = data.get("thorough", False)
    if not isinstance(thorough, bool):
        raise ProfileError(f"--profile thorough must be true or false, not {thorough!r}")
    sizes = {name: data.get(name, 1) for name in ("rollout_tp", "actor_tp")}
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProfileError(f"--profile {name} must be a positive integer, not {value!r}")
    beside = data.get("beside", [])
    if not isinstance(beside, list) or not all(isinstance(b, str) for b in beside):
        raise ProfileError(f"--profile beside must be a list of script names, not {beside!r}")
    trainer = data.get("trainer", {})
    if problem := trainer_problem(trainer):
        raise ProfileError(f"--profile trainer: {problem}")
    runs_cubins = data.get("runs_cubins", [])
    if not isinstance(runs_cubins, list) or not all(isinstance(c, str) for c in runs_cubins):
        raise ProfileError(f"--profile runs_cubins must be a list of cubin names (sm_100...), not {runs_cubins!r}")
    jit_caches = data.get("jit_caches", {})
    if not isinstance(jit_caches, dict) or not all(isinstance(r, dict) and isinstance(r.get("var"), str)
                                                   and isinstance(r.get("default"), str) for r in jit_caches.values()):
        raise ProfileError("--profile jit_caches must be a JSON object of {var, default, ...} rows")
    return Profile(key, arch, fp8, thresholds, gpu_count, variant, thorough, sizes["rollout_tp"], sizes["actor_tp"],
                   tuple(beside), trainer, tuple(runs_cubins), jit_caches)


# What the trainer check reads of each part of --profile's trainer (the rows verlenv hands over).
TRAINER_SHAPE = {"actor": {"name": str, "config_name": str, "tp_overrides": list, "tp_divides": list,
                           "overrides": list, "fast_overrides": list},
                 "rollout": {"name": str, "tp_divides": list, "overrides": list, "fast_overrides": list},
                 "family": {"name": str, "model_class": str, "inputs": str, "config": dict, "token_ids": dict,
                            "overrides": list, "logit_std": (int, float), "embedding_scale": (int, float),
                            "routed_influence": (int, float)}}


def trainer_problem(trainer) -> str | None:
    """Why --profile's trainer part cannot drive the trainer check, in one line; None when it can (or is absent)."""
    if not isinstance(trainer, dict):
        return "must be a JSON object of actor, rollout, overrides, families, parallel"
    if not trainer:
        return None
    for part in ("actor", "rollout"):
        row = trainer.get(part)
        if not isinstance(row, dict):
            return f"{part} must be its row (an object)"
        for key, kind in TRAINER_SHAPE[part].items():
            if not isinstance(row.get(key), kind):
                return f"{part}.{key} is missing or not a {getattr(kind, '__name__', 'number')}"
    if not isinstance(trainer.get("overrides", {}), dict):
        return "overrides must be an object of override -> why"
    families = trainer.get("families")
    if not isinstance(families, list) or not families:
        return "families must be a non-empty list of family rows"
    for i, family in enumerate(families):
        if not isinstance(family, dict):
            return f"families[{i}] must be an object"
        for key, kind in TRAINER_SHAPE["family"].items():
            if not isinstance(family.get(key), kind) or isinstance(family.get(key), bool):
                return f"families[{i}].{key} is missing or of the wrong type"
    parallel = trainer.get("parallel", 1)
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        return f"parallel must be a positive integer, not {parallel!r}"
    return None


def _parse_arch(arch: str):
    parts = arch.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: {message}\n")


def parse_args(argv: list[str], prog: str) -> tuple[str, Profile]:
    parser = _OneLineParser(prog=prog, description="GPU kernel checks; writes a JSON list of results.")
    parser.add_argument("--out", required=True, help="path of the JSON result file")
    parser.add_argument("--profile", required=True, help="GPU profile as JSON: key, arch, fp8, thresholds")
    args = parser.parse_args(argv)
    try:
        return args.out, parse_profile(args.profile)
    except ProfileError as e:
        parser.error(str(e))


def _json_safe(value):
    """NaN and infinity are not JSON: write them as strings so the file stays valid."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


class Report:
    """The result file: rewritten whole after every check, so a crash keeps what ran before it."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.results: list[dict] = []
        self._write()

    def add(self, check: str, package: str, status: str, reason: str = "", numbers: dict | None = None,
            seconds: float = 0.0, known_issue: dict | None = None) -> dict:
        result = {"check": check, "package": package, "status": status, "reason": reason,
                  "numbers": _json_safe(numbers or {}), "seconds": round(seconds, 3)}
        if known_issue:
            result["known_issue"] = known_issue
        self.results.append(result)
        self._write()
        shown = f" ({reason})" if reason else ""
        print(f"{status.upper():4} {check}{shown}", flush=True)
        return result

    def _write(self):
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(self.path)}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.results, f, indent=1, allow_nan=False)
                f.write("\n")
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def describe(exc: BaseException, limit: int = 2000) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= limit else text[:limit] + " ..."


def run_check(report: Report, check: str, package: str, fn, torch=None) -> dict:
    """Run one check; fn returns numbers, or (numbers, note). Exceptions become fail/skip results."""
    start = time.perf_counter()
    try:
        out = fn()
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # an asynchronous CUDA error belongs to the check that caused it
        numbers, note = out if isinstance(out, tuple) else (out, "")
        return report.add(check, package, "pass", note, numbers, time.perf_counter() - start)
    except Skipped as e:
        return report.add(check, package, "skip", str(e), {}, time.perf_counter() - start)
    except Failed as e:
        return report.add(check, package, "fail", str(e), e.numbers, time.perf_counter() - start, e.known_issue)
    except Exception as e:  # one check raising must not stop the others
        traceback.print_exc()
        return report.add(check, package, "fail", describe(e), {}, time.perf_counter() - start)


def installed(module: str) -> bool:
    """Whether `module` can be imported, without importing it (a broken install must fail, not skip)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def cuda_state(torch) -> tuple[str, str]:
    """('ready', '') or ('skip', reason) when this machine has no GPU, or ('fail', reason) when it has one
    that torch cannot use (CPU-only torch, driver too old for the torch CUDA build, ...)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = torch.cuda.is_available() and torch.cuda.device_count() > 0
    if available:
        return "ready", ""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return "skip", f"{NO_CUDA} (CUDA_VISIBLE_DEVICES={visible!r})"
    if not os.path.exists("/dev/nvidia0") and not os.path.exists("/dev/nvidiactl"):
        return "skip", NO_CUDA
    if torch.version.cuda is None:
        return "fail", f"this machine has an NVIDIA GPU but torch {torch.__version__} is a CPU-only build"
    said = "; ".join(str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip())
    return "fail", (f"this machine has an NVIDIA GPU but torch {torch.__version__} (CUDA {torch.version.cuda}) "
                    f"cannot use it" + (f": {said}" if said else ""))


def main(package: str, requires: dict[str, str], checks, argv: list[str] | None = None, vet=None) -> int:
    """The body of every script. `requires` maps import names to the distribution a user installs, the
    checked package first; `vet()` may return why the installed package is the wrong one (asked as soon as
    it is found, before torch or a GPU); `checks(profile, torch)` returns [(check name, fn)], run in order.
    Returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    out, profile = parse_args(argv, prog=os.path.basename(sys.argv[0]) or package)
    report = Report(out)
    for index, (module, distribution) in enumerate(requires.items()):
        if not installed(module):
            report.add(package, package, "skip", f"{distribution} not installed")
            return 0
        wrong = vet() if vet and index == 0 else None
        if wrong:
            report.add(f"{package}/import", package, "fail", wrong)
            return 0
    try:
        import torch
    except Exception as e:  # torch is there (find_spec saw it) but does not import: a broken install
        traceback.print_exc()
        report.add(f"{package}/import", package, "fail", f"import torch failed: {describe(e)}")
        return 0
    state, reason = cuda_state(torch)
    if state != "ready":
        report.add(package, package, state, reason)
        return 0
    for name, fn in checks(profile, torch):
        result = run_check(report, name, package, fn, torch)
        if name.endswith("/import") and result["status"] == "fail":
            break  # nothing else can run without the package
    return 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def within(value: float, limit: float) -> bool:
    """value <= limit, and False for NaN (a NaN error must never pass)."""
    return value <= limit


def at_least(value: float, floor: float) -> bool:
    """value >= floor, and False for NaN."""
    return value >= floor


def relative_error_values(out, ref) -> float:
    """||out - ref|| / ||ref|| over flat or nested sequences of numbers (pure Python)."""
    out, ref = _flatten(out), _flatten(ref)
    if len(out) != len(ref):
        raise ValueError(f"shapes differ: {len(out)} values vs {len(ref)}")
    diff = math.sqrt(math.fsum((a - b) ** 2 for a, b in zip(out, ref)))
    norm = math.sqrt(math.fsum(b * b for b in ref))
    if norm == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / norm


def _flatten(values) -> list[float]:
    if isinstance(values, (int, float)):
        return [float(values)]
    flat: list[float] = []
    for v in values:
        flat.extend(_flatten(v))
    return flat


def relative_error(out, ref) -> float:
    """||out - ref|| / ||ref|| of two tensors, computed in float64."""
    out, ref = out.detach().double(), ref.detach().double()
    if out.shape != ref.shape:
        raise ValueError(f"shapes differ: {tuple(out.shape)} vs {tuple(ref.shape)}")
    norm = ref.norm().item()
    diff = (out - ref).norm().item()
    if norm == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / norm


def max_abs_error(out, ref) -> float:
    return (out.detach().double() - ref.detach().double()).abs().max().item()


def compare(numbers: dict, problems: list[str], name: str, out, ref, limit: float) -> None:
    """Record name_rel_err and name_max_abs in numbers; note a problem when the relative error is above limit."""
    rel = relative_error(out, ref)
    numbers[f"{name}_rel_err"] = rel
    numbers[f"{name}_max_abs"] = max_abs_error(out, ref)
    if not within(rel, limit):
        problems.append(f"{name} relative error {rel:.3g} above {limit:.3g}")


def verdict(numbers: dict, problems: list[str], note: str = "", known_issue: dict | None = None):
    """What a check returns: its numbers, or Failed with every problem found (and the known upstream failure they
    are, where they are one)."""
    if problems:
        raise Failed("; ".join(problems), numbers, known_issue)
    return numbers, note


def timing_stats(times_ms: list[float]) -> dict:
    if not times_ms:
        raise ValueError("no timings")
    return {"median_ms": statistics.median(times_ms), "min_ms": min(times_ms), "max_ms": max(times_ms),
            "repeats": len(times_ms)}


def cuda_times_ms(torch, fn, warmup: int = 3, repeats: int = 10) -> list[float]:
    """Per-call device time of fn in ms, from CUDA events, after warm-up calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def attention_flops(batch: int, seqlen: int, heads: int, head_dim: int, causal: bool) -> float:
    """Forward FLOPs of attention: two matmuls of 2*S*S*D each per head; causal does half."""
    flops = 4.0 * batch * seqlen * seqlen * heads * head_dim
    return flops / 2 if causal else flops


def matmul_flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def algbw_gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def busbw_gbps(nbytes: int, ms: float, world: int) -> float:
    """All-reduce bus bandwidth as nccl-tests defines it: algbw * 2(n-1)/n."""
    return algbw_gbps(nbytes, ms) * 2 * (world - 1) / world


def arch_of(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


def norm_case(torch, seed, rows, hidden, device):
    """bf16 input, upstream gradient, weight near 1 and small bias for a norm layer check."""
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, hidden, device=device, dtype=torch.bfloat16, generator=gen).requires_grad_()
    dy = torch.randn(rows, hidden, device=device, dtype=torch.bfloat16, generator=gen)
    weight = (1 + 0.1 * torch.randn(hidden, device=device, generator=gen)).bfloat16()
    bias = (0.1 * torch.randn(hidden, device=device, generator=gen)).bfloat16()
    return x, dy, weight, bias


def leaves64(*tensors):
    """float64 copies that collect their own gradients: the reference side of a check."""
    return [t.detach().double().requires_grad_() for t in tensors]


def judge(profile, dtype_name, pairs, note):
    """Compare each (name, got, want) pair within the profile's bound for dtype_name; one verdict for all."""
    numbers, problems = {}, []
    for name, got, want in pairs:
        compare(numbers, problems, name, got, want, profile.max_rel_err(dtype_name))
    return verdict(numbers, problems, note)


def judge_norm(torch, profile, module, x, dy, weight, bias=None, eps=1e-5):
    """Load weight (and bias) into a bf16 norm module, run fwd+bwd, and compare with float64 LayerNorm
    (bias given) or RMSNorm (no bias): output and every gradient."""
    with torch.no_grad():
        module.weight.copy_(weight)
        if bias is not None:
            module.bias.copy_(bias)
    out = module(x)
    out.backward(dy)
    if bias is not None:
        x64, w64, b64 = leaves64(x, weight, bias)
        ref = torch.nn.functional.layer_norm(x64, (x.shape[-1],), w64, b64, eps=eps)
    else:
        x64, w64 = leaves64(x, weight)
        ref = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w64
    ref.backward(dy.double())
    pairs = [("out", out, ref), ("dx", x.grad, x64.grad), ("dweight", module.weight.grad, w64.grad)]
    if bias is not None:
        pairs.append(("dbias", module.bias.grad, b64.grad))
    return judge(profile, "bf16", pairs, f"{tuple(x.shape)} bf16")
