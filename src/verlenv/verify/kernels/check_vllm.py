"""GPU check of vLLM: greedy generation from a tiny Llama with random weights written here (no download), on the
FLASH_ATTN backend where the installed vLLM registers it; the first generated token of every prompt must match
transformers' greedy pick for the same weights. Reports tokens/s.

First, the time to the first token of a sampled (top-k/top-p) request on a fresh engine, and what that compiled:
files that appeared in FlashInfer's JIT cache (nvcc at run time: a warning), Triton's, vLLM's and torch
inductor's caches while the engine started and produced it.

The engine is eager in both modes. In the fast proof it gets a fixed KV cache, so it skips vLLM's memory profile,
which fails when free GPU memory grows while it profiles - as it does when verl's trainer, running beside this
check on the same GPU, frees memory; thorough keeps vLLM's own sizing.

Thresholds: none.
Run: python check_vllm.py --out results.json --profile '{"key": "h100", "arch": "9.0", "fp8": true}'
"""

import inspect
import os
import shutil
import sys
import tempfile
import time

import _common
import _engines
import _jit_caches

PACKAGE = "vllm"
# This process has initialised CUDA (the reference model) before the engine starts: a forked EngineCore cannot
# re-initialise it ("Cannot re-initialize CUDA in forked subprocess"). verl's workers use spawn too.
os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
# vLLM's usage stats: a file under $HOME/.config/vllm and a report to vLLM's server, from every engine started. A check
# has no business writing outside the caches it was given, nor reaching out from an air-gapped node (a GPU visit found
# the file in the check's home, 2026-11-28). The user's own setting wins.
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
VOCAB = 256
NEW_TOKENS = _engines.NEW_TOKENS
# The fast proof's KV cache: 16 prompts of at most 128 tokens need well under 1 MiB per layer.
KV_CACHE_BYTES = 1 << 28
SPECIAL = ["<unk>", "<s>", "</s>"]


def write_tiny_model(directory, torch):
    """A 2-layer Llama checkpoint with random weights and a word-level tokenizer, laid out like a hub model."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = SPECIAL + [f"w{i}" for i in range(VOCAB - len(SPECIAL))]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # decodes to words joined by spaces
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(directory)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 1.0)  # logits far apart, so greedy picks do not hinge on rounding
    model.to(torch.bfloat16).save_pretrained(directory)


def prompt_token_ids(torch):
    return _engines.prompt_token_ids(torch, VOCAB, len(SPECIAL), 1)  # <s> first, as a tokenizer with a BOS would do


def attention_backend(llm_class, kwargs):
    """Ask for FLASH_ATTN only where this vLLM registers it (forcing an unknown backend fails at startup)."""
    if "attention_config" in inspect.signature(llm_class.__init__).parameters:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        if "FLASH_ATTN" in AttentionBackendEnum.__members__:
            kwargs["attention_config"] = {"backend": "FLASH_ATTN"}
            return "FLASH_ATTN"
        return "vLLM's default backend (FLASH_ATTN not registered)"
    for module in ("vllm.attention.backends.registry", "vllm.platforms.interface"):  # older vLLM: an env var
        try:
            backends = __import__(module, fromlist=["_Backend"])._Backend
        except (ImportError, AttributeError):
            continue
        if "FLASH_ATTN" in backends.__members__:
            os.environ["VLLM_ATTENTION_BACKEND"] = "FLASH_ATTN"
            return "FLASH_ATTN"
    return "vLLM's default backend (FLASH_ATTN not registered)"


def fixed_kv_cache(kwargs, engine_args_class) -> bool:
    """Give the engine a KV cache of its own size (no memory profile) where this vLLM has the setting."""
    import dataclasses

    if "kv_cache_memory_bytes" not in {f.name for f in dataclasses.fields(engine_args_class)}:
        return False
    kwargs["kv_cache_memory_bytes"] = KV_CACHE_BYTES
    return True


def check_import():
    import vllm

    return {}, f"vllm {vllm.__version__}"


def check_generate(torch, profile):
    from vllm import LLM, SamplingParams
    from vllm.engine.arg_utils import EngineArgs

    directory = tempfile.mkdtemp(prefix="verlenv-vllm-")
    try:
        write_tiny_model(directory, torch)
        kwargs = dict(model=directory, dtype="bfloat16", enforce_eager=True, gpu_memory_utilization=0.2,
                      max_model_len=128, seed=0, enable_prefix_caching=False)
        backend = attention_backend(LLM, kwargs)
        fixed = not profile.thorough and fixed_kv_cache(kwargs, EngineArgs)
        # Where each JIT compiler vLLM may use keeps what it compiled (data/packages.toml's [jit_caches]).
        dirs = _engines.jit_cache_dirs(caches := _jit_caches.watched(profile.jit_caches, "vllm"))
        before = {name: _engines.cache_files(path) for name, path in dirs.items()}
        start = time.perf_counter()
        llm = LLM(**kwargs)
        engine_s = time.perf_counter() - start
        prompts = prompt_token_ids(torch)
        requests = [{"prompt_token_ids": ids} for ids in prompts]
        # Sampled with top-k/top-p, as a rollout samples: greedy requests skip the sampler that may JIT-compile.
        start = time.perf_counter()
        llm.generate(requests[:1], SamplingParams(max_tokens=1, temperature=1.0, top_k=50, top_p=0.9),
                     use_tqdm=False)
        first_token_s = time.perf_counter() - start
        compiled = _engines.new_cache_files(before, dirs)
        params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
        llm.generate(requests, params, use_tqdm=False)  # warm-up
        start = time.perf_counter()
        outputs = llm.generate(requests, params, use_tqdm=False)
        seconds = time.perf_counter() - start
        del llm  # shuts the engine down and frees its share of GPU memory before the reference runs
        want, _ = _engines.transformers_greedy(torch, directory, prompts)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    got = [list(o.outputs[0].token_ids) for o in outputs]
    produced = sum(len(g) for g in got)
    same = sum(a == b for g, w in zip(got, want) for a, b in zip(g, w))
    numbers = {"engine_start_s": engine_s, "first_token_s": first_token_s,
               **{f"jit_new_files_{name}": len(files) for name, files in compiled.items()},
               "prompts": len(prompts), "tokens": produced, "tokens_per_s": produced / seconds,
               "first_token_matches": sum(bool(g) and g[0] == w[0] for g, w in zip(got, want)),
               "token_agreement": same / (len(prompts) * NEW_TOKENS)}
    problems = []
    short = [i for i, g in enumerate(got) if len(g) != NEW_TOKENS]
    if short:
        problems.append(f"prompts {short} did not get {NEW_TOKENS} tokens")
    if numbers["first_token_matches"] != len(prompts):
        problems.append(f"first greedy token differs from transformers for "
                        f"{len(prompts) - numbers['first_token_matches']} of {len(prompts)} prompts")
    built = _engines.nvcc_built(compiled, caches)
    if built:
        problems.append(f"the first generation JIT-compiled {len(built)} FlashInfer files with nvcc (e.g. "
                        f"{built[0]}); is VLLM_USE_FLASHINFER_SAMPLER=0 in effect (the env's runtime defaults)?")
    jit = ", ".join(f"{n} {len(f)}" for n, f in compiled.items() if f) or "nothing"
    cache = f"a fixed {KV_CACHE_BYTES >> 20} MiB KV cache" if fixed else "vLLM's own KV cache sizing"
    beside = f", beside {', '.join(profile.beside)}" if profile.beside else ""
    return _common.verdict(numbers, problems, f"attention {backend}; {produced / seconds:.0f} tokens/s for "
                                              f"{len(prompts)} prompts x {NEW_TOKENS} tokens, eager, bf16, {cache}"
                                              f"{beside}; first token {first_token_s:.1f} s after a "
                                              f"{engine_s:.0f} s engine start, new JIT cache files: {jit}")


def checks(profile, torch):
    return [
        ("vllm/import", check_import),
        ("vllm/generate/bf16", lambda: check_generate(torch, profile)),
    ]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"vllm": "vllm", "torch": "torch"}, checks))
