"""GPU check of SGLang: its offline engine (sglang.Engine: the scheduler and detokenizer processes, no HTTP server)
generates greedily from the tiny random model of the trainer check's first text family (data/families.toml, handed
over in --profile; written here with _models.py, the same tokenizer and model builder verl's check uses: no download);
the first generated token of every prompt must match transformers' greedy pick for the same weights (near ties of the
reference are reported, not judged). Reports tokens/s.

First, the time to the first token of a sampled request (temperature 1, as verl's rollout samples) on a fresh engine,
and what that compiled: files that appeared in SGLang's own JIT kernel cache (tvm-ffi: its activation, RoPE and
KV-store kernels are compiled with nvcc at their first call; SGLang 0.5.12 has no prebuilt fallback for them),
FlashInfer's (attention modules, nvcc), Triton's and torch inductor's while the engine started and produced it. nvcc
at run time is SGLang's design, so what it built is reported; a build that fails fails the generation.

The fast proof runs the engine eager (no decode CUDA graphs, and no piecewise prefill graphs, which SGLang 0.5.12
captures by default and verl's enforce_eager leaves on) on FA3, prebuilt in sglang-kernel for sm80/sm86/sm90 (no
nvcc for attention), with its KV pool capped at KV_TOKENS tokens; thorough runs what verl's rollout runs: FlashInfer
attention, the backend verl 0.9.1 gives SGLang >= 0.5.12 (verl/workers/rollout/sglang_rollout/async_sglang_server.py:
"FA3 CUDA-graph capture is broken on sglang>=0.5.12"), JIT-compiled with nvcc at first use, SGLang's CUDA graphs and
its own KV sizing. The engine runs in a child process: SGLang kills its whole process tree when its scheduler or
detokenizer dies (SIGQUIT handlers), which would take the result file's writer with it.

Thresholds: none.
Run: python check_sglang.py --out results.json --profile '{"key": "h100", "arch": "9.0", "fp8": true,
     "trainer": {..., "families": [{...}]}}'
"""

import dataclasses
import os
import shutil
import sys
import tempfile
import time

import _common
import _engines
import _jit_caches
import _models

PACKAGE = "sglang"
# Attention per mode (thorough: verl's choice for SGLang >= 0.5.12; fast: FA3 from sglang-kernel, eager only).
ATTENTION = {False: "fa3", True: "flashinfer"}
# The fast proof's KV pool: 16 prompts of at most 20 + 8 tokens need under 500 tokens.
KV_TOKENS = 4096
# A share of the GPU memory free at start (SGLang sizes weights + KV from it): the trainer check may run beside.
MEM_FRACTION = 0.2
# verl's rollout samples at temperature 1 without top-k/top-p (its defaults -1 and 1.0): SGLang's plain multinomial.
# A top-k/top-p request would JIT-compile FlashInfer's sampling module (14 min on 2 busy CPU cores here).
SAMPLED = {"max_new_tokens": 1, "temperature": 1.0}
GREEDY = {"max_new_tokens": _engines.NEW_TOKENS, "temperature": 0.0, "ignore_eos": True}
# Distributions that install the sgl_kernel package: two of them overwrite each other's files.
KERNEL_DISTS = ("sglang-kernel", "sgl-kernel")
# An engine start plus JIT builds on a fresh node; below the runner's limit for the script (data/packages.toml).
ENGINE_TIMEOUT_S = 540


def engine_kwargs(directory: str, thorough: bool, fields: set[str]) -> tuple[dict, list[str]]:
    """sglang.Engine's arguments (ServerArgs fields) for the check, and those this SGLang's ServerArgs lacks (left
    out: an older SGLang without piecewise graphs needs no switch for them)."""
    kwargs = {"model_path": directory, "dtype": "bfloat16", "mem_fraction_static": MEM_FRACTION,
              "context_length": 128, "random_seed": 0, "attention_backend": ATTENTION[thorough],
              "skip_tokenizer_init": True, "log_level": "warning",
              # No prefix reuse: the timed run must compute what the warm-up computed.
              "disable_radix_cache": True}
    if not thorough:
        kwargs |= {"disable_cuda_graph": True, "disable_piecewise_cuda_graph": True, "max_total_tokens": KV_TOKENS}
    missing = sorted(k for k in kwargs if k not in fields)
    return {k: v for k, v in kwargs.items() if k in fields}, missing


def text_family(profile) -> dict:
    """The first text family the profile's trainer part names (verify hands over data/families.toml's rows)."""
    for family in (profile.trainer or {}).get("families") or []:
        if family.get("inputs") == "text":
            return family
    raise _common.Skipped("--profile names no text model family (trainer.families): no model to generate from")


def prompts_for(torch) -> list[list[int]]:
    """Prompts of ordinary words of _models' tokenizer (no vision words, which need their images)."""
    ids = _models.ids()
    first = len(_models.SPECIAL) + len(_models.VISION_WORDS)
    return _engines.prompt_token_ids(torch, _models.VOCAB, first, ids["<s>"])


def output_ids(outputs) -> list[list[int]]:
    """Engine.generate's answers (one dict per prompt, in order) -> their generated token ids."""
    if isinstance(outputs, dict):
        outputs = [outputs]
    return [list(o.get("output_ids") or []) for o in outputs]


def kernel_dist_problem(versions: dict[str, str | None]) -> str | None:
    """Why the installed kernel distributions cannot work, in one line; versions: distribution -> version or None."""
    both = [f"{d} {versions[d]}" for d in KERNEL_DISTS if versions.get(d)]
    if len(both) > 1:
        return (f"{' and '.join(both)} both install sgl_kernel/ and overwrite each other's files: "
                f"`pip uninstall -y sgl-kernel sglang-kernel`, then install the env's lock again")
    fi, cubin = versions.get("flashinfer-python"), versions.get("flashinfer-cubin")
    if fi and cubin and fi != cubin:
        return f"flashinfer-cubin {cubin} with flashinfer-python {fi}: FlashInfer refuses to import unless they match"
    return None


def installed_versions() -> dict[str, str | None]:
    from importlib import metadata

    found = {}
    for dist in (*KERNEL_DISTS, "flashinfer-python", "flashinfer-cubin"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def vet() -> str | None:
    return kernel_dist_problem(installed_versions())


def check_import():
    import sgl_kernel
    import sglang

    versions = installed_versions()
    ops = os.path.basename(os.path.dirname(sgl_kernel.common_ops.__file__))  # sm90 (Hopper) or sm100 (the others)
    return ({"sglang": sglang.__version__, "sglang_kernel": versions["sglang-kernel"] or versions["sgl-kernel"],
             "flashinfer": versions["flashinfer-python"], "common_ops": ops},
            f"sglang {sglang.__version__}, sglang-kernel {versions['sglang-kernel']} ({ops} ops)")


def generate_in_engine(directory: str, thorough: bool, prompts: list[list[int]], caches: dict) -> dict:
    """In the engine's child process: start the engine, time a sampled first token, then greedy generation."""
    import sglang
    from sglang.srt.server_args import ServerArgs

    kwargs, missing = engine_kwargs(directory, thorough, {f.name for f in dataclasses.fields(ServerArgs)})
    dirs = _engines.jit_cache_dirs(caches)
    before = {name: _engines.cache_files(path) for name, path in dirs.items()}
    start = time.perf_counter()
    engine = sglang.Engine(**kwargs)
    try:
        engine_s = time.perf_counter() - start
        # Sampled, as a rollout samples (greedy requests take argmax and skip the sampler).
        start = time.perf_counter()
        engine.generate(input_ids=prompts[:1], sampling_params=SAMPLED)
        first_token_s = time.perf_counter() - start
        compiled = _engines.new_cache_files(before, dirs)
        engine.generate(input_ids=prompts, sampling_params=GREEDY)  # warm-up
        start = time.perf_counter()
        outputs = engine.generate(input_ids=prompts, sampling_params=GREEDY)
        seconds = time.perf_counter() - start
        args = engine.server_args
        return {"got": output_ids(outputs), "engine_start_s": engine_s, "first_token_s": first_token_s,
                "seconds": seconds, "compiled": compiled, "missing": missing,
                "attention": args.attention_backend, "sampling": args.sampling_backend}
    finally:
        engine.shutdown()  # frees the GPU before the reference model loads


def check_generate(torch, profile):
    family = text_family(profile)
    directory = tempfile.mkdtemp(prefix="verlenv-sglang-")
    try:
        _models.write_tokenizer(directory)
        _models.write_model(directory, torch, family)
        prompts = prompts_for(torch)
        # Where each JIT compiler SGLang may use keeps what it compiled (data/packages.toml's [jit_caches]).
        caches = _jit_caches.watched(profile.jit_caches, "sglang")
        run = _engines.run_isolated(generate_in_engine, directory, profile.thorough, prompts, caches,
                                    timeout=ENGINE_TIMEOUT_S, what="SGLang's engine")
        want, margins = _engines.transformers_greedy(torch, directory, prompts)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    numbers, problems = _engines.agreement(run["got"], want, margins)
    built = _engines.nvcc_built(run["compiled"], caches)
    numbers.update({"family": family["name"], "engine_start_s": run["engine_start_s"],
                    "first_token_s": run["first_token_s"], "tokens_per_s": numbers["tokens"] / run["seconds"],
                    "nvcc_built": len(built),
                    **{f"jit_new_files_{name}": len(files) for name, files in run["compiled"].items()}})
    jit = ", ".join(f"{n} {len(f)}" for n, f in run["compiled"].items() if f) or "nothing"
    mode = "CUDA graphs, SGLang's KV sizing" if profile.thorough else f"eager, a KV pool of {KV_TOKENS} tokens"
    unset = f"; this SGLang lacks {', '.join(run['missing'])}" if run["missing"] else ""
    beside = f", beside {', '.join(profile.beside)}" if profile.beside else ""
    return _common.verdict(numbers, problems,
                           f"{family['name']}: attention {run['attention']}, sampling {run['sampling']}; "
                           f"{numbers['tokens_per_s']:.0f} tokens/s for {numbers['prompts']} prompts x "
                           f"{_engines.NEW_TOKENS} tokens, {mode}, bf16{beside}{unset}; first token "
                           f"{run['first_token_s']:.1f} s after a {run['engine_start_s']:.0f} s engine start; new JIT "
                           f"cache files: {jit} ({len(built)} nvcc builds)")


def checks(profile, torch):
    return [
        ("sglang/import", check_import),
        ("sglang/generate/bf16", lambda: check_generate(torch, profile)),
    ]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"sglang": "sglang", "sgl_kernel": "sglang-kernel", "torch": "torch"}, checks,
                          vet=vet))
