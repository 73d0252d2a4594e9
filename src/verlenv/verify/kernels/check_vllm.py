"""GPU check of vLLM: greedy generation from a tiny Llama with random weights written here (no download), on the
FLASH_ATTN backend where the installed vLLM registers it; the first generated token of every prompt must match
transformers' greedy pick for the same weights. Reports tokens/s.

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

PACKAGE = "vllm"
VOCAB, PROMPTS, NEW_TOKENS = 256, 16, 8
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
    gen = torch.Generator().manual_seed(1)
    prompts = []
    for i in range(PROMPTS):
        words = torch.randint(len(SPECIAL), VOCAB, (4 + i,), generator=gen).tolist()
        prompts.append([1] + words)  # <s> first, as a tokenizer with a BOS would do
    return prompts


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


def transformers_greedy(torch, directory, prompts, device="cuda"):
    """Greedy continuation of each prompt by transformers, one full forward per token (no cache, no stopping)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory).to(device, torch.bfloat16).eval()
    picks = []
    with torch.no_grad():
        for ids in prompts:
            x = torch.tensor([ids], device=device)
            for _ in range(NEW_TOKENS):
                x = torch.cat([x, model(x).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            picks.append(x[0, len(ids):].tolist())
    return picks


def check_import():
    import vllm

    return {}, f"vllm {vllm.__version__}"


def check_generate(torch):
    from vllm import LLM, SamplingParams

    directory = tempfile.mkdtemp(prefix="verlenv-vllm-")
    try:
        write_tiny_model(directory, torch)
        kwargs = dict(model=directory, dtype="bfloat16", enforce_eager=True, gpu_memory_utilization=0.2,
                      max_model_len=128, seed=0, enable_prefix_caching=False)
        backend = attention_backend(LLM, kwargs)
        llm = LLM(**kwargs)
        prompts = prompt_token_ids(torch)
        params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
        requests = [{"prompt_token_ids": ids} for ids in prompts]
        llm.generate(requests, params, use_tqdm=False)  # warm-up
        start = time.perf_counter()
        outputs = llm.generate(requests, params, use_tqdm=False)
        seconds = time.perf_counter() - start
        del llm  # shuts the engine down and frees its share of GPU memory before the reference runs
        want = transformers_greedy(torch, directory, prompts)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    got = [list(o.outputs[0].token_ids) for o in outputs]
    produced = sum(len(g) for g in got)
    same = sum(a == b for g, w in zip(got, want) for a, b in zip(g, w))
    numbers = {"prompts": len(prompts), "tokens": produced, "tokens_per_s": produced / seconds,
               "first_token_matches": sum(bool(g) and g[0] == w[0] for g, w in zip(got, want)),
               "token_agreement": same / (len(prompts) * NEW_TOKENS)}
    problems = []
    short = [i for i, g in enumerate(got) if len(g) != NEW_TOKENS]
    if short:
        problems.append(f"prompts {short} did not get {NEW_TOKENS} tokens")
    if numbers["first_token_matches"] != len(prompts):
        problems.append(f"first greedy token differs from transformers for "
                        f"{len(prompts) - numbers['first_token_matches']} of {len(prompts)} prompts")
    return _common.verdict(numbers, problems, f"attention {backend}; {produced / seconds:.0f} tokens/s for "
                                              f"{len(prompts)} prompts x {NEW_TOKENS} tokens, eager, bf16")


def checks(profile, torch):
    return [
        ("vllm/import", check_import),
        ("vllm/generate/bf16", lambda: check_generate(torch)),
    ]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"vllm": "vllm", "torch": "torch"}, checks))
