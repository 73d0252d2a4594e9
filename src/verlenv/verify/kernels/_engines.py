"""For a check of an inference engine (check_vllm.py, check_sglang.py): prompts, transformers' greedy reference for
them, the judging of the engine's tokens against it (check_sglang.py; prompts in the vocabulary of the trainer check's
tokenizer, _models.py), the JIT caches an engine may fill at run time, and a child process for an engine that may
kill its own process tree.

Standard library at import: it runs in the env under test beside _common; torch is passed in by the scripts once they
know it imports.
"""

import multiprocessing
import os
import traceback

import _common
import _jit_caches

PROMPTS, NEW_TOKENS = 16, 8
# A prompt whose reference logits of its two best next tokens are closer than this is a near tie: bf16 rounding in
# another kernel may pick either, so its first token is reported, not judged. bf16 steps are 1/32 at logits of 4 to 8
# (the trainer check's models have logits of standard deviation 2, families.toml logit_std): three steps.
NEAR_TIE = 0.1


def prompt_token_ids(torch, vocab: int, first_word: int, bos: int) -> list[list[int]]:
    """PROMPTS prompts of 5 to 20 tokens: the BOS, then seeded ids of ordinary words (first_word..vocab-1)."""
    gen = torch.Generator().manual_seed(1)
    return [[bos] + torch.randint(first_word, vocab, (4 + i,), generator=gen).tolist() for i in range(PROMPTS)]


def transformers_greedy(torch, directory, prompts, device="cuda") -> tuple[list[list[int]], list[float]]:
    """Greedy continuation of each prompt by transformers, one full forward per token (no cache, no stopping), and
    each prompt's margin between its two best first tokens (in logits)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory).to(device, torch.bfloat16).eval()
    picks, margins = [], []
    with torch.no_grad():
        for ids in prompts:
            x = torch.tensor([ids], device=device)
            for step in range(NEW_TOKENS):
                logits = model(x).logits[:, -1].float()
                if step == 0:
                    top = logits[0].topk(2).values
                    margins.append((top[0] - top[1]).item())
                x = torch.cat([x, logits.argmax(-1, keepdim=True)], dim=1)
            picks.append(x[0, len(ids):].tolist())
    return picks, margins


def agreement(got: list[list[int]], want: list[list[int]], margins: list[float]) -> tuple[dict, list[str]]:
    """The engine's greedy tokens against transformers': (numbers, problems). Every prompt must get NEW_TOKENS tokens
    and, unless its reference is a near tie, the same first token (later tokens may part where bf16 rounding differs:
    reported, not judged)."""
    judged = [i for i, m in enumerate(margins) if m >= NEAR_TIE]
    same = sum(a == b for g, w in zip(got, want) for a, b in zip(g, w))
    first = [i for i in range(min(len(got), len(want))) if got[i] and got[i][0] == want[i][0]]
    numbers = {"prompts": len(want), "tokens": sum(len(g) for g in got), "first_token_matches": len(first),
               "first_token_judged": len(judged), "token_agreement": same / (len(want) * NEW_TOKENS) if want else 0.0}
    problems = []
    if len(got) != len(want):
        problems.append(f"the engine answered {len(got)} of {len(want)} prompts")
    short = [i for i, g in enumerate(got) if len(g) != NEW_TOKENS]
    if short:
        problems.append(f"prompts {short} did not get {NEW_TOKENS} tokens")
    differ = [i for i in judged if i not in first]
    if differ:
        problems.append(f"first greedy token differs from transformers for {len(differ)} of {len(judged)} prompts "
                        f"(prompts {differ}; near ties of the reference not judged)")
    return numbers, problems


def jit_cache_dirs(caches: dict, environ=os.environ) -> dict[str, str]:
    """caches: [jit_caches] rows by name (data/packages.toml); their folders in this environment."""
    return {name: _jit_caches.folder(row, environ) for name, row in caches.items()}


def cache_files(directory: str) -> set[str]:
    found = set()
    for root, _, files in os.walk(directory):
        found.update(os.path.join(root, f) for f in files)
    return found


def new_cache_files(before: dict[str, set[str]], dirs: dict[str, str]) -> dict[str, list[str]]:
    return {name: sorted(cache_files(path) - before[name]) for name, path in dirs.items()}


def nvcc_built(new: dict[str, list[str]], caches) -> list[str]:
    """Shared objects that appeared in the caches an nvcc JIT writes (tvm-ffi's builds, FlashInfer's cached_ops):
    modules compiled with nvcc at run time. Downloaded cubins and build scratch do not count."""
    nvcc = {name for name, row in caches.items() if row.get("nvcc")}
    return [f for name in sorted(nvcc) for f in new.get(name, []) if f.endswith(".so")]


def _child(conn, fn, args):
    try:
        conn.send(("ok", fn(*args)))
    except BaseException as e:  # noqa: BLE001  sent to the parent, which reports it as the check's failure
        traceback.print_exc()
        conn.send(("error", _common.describe(e)))
    finally:
        conn.close()


def run_isolated(fn, *args, timeout: float | None = None, what: str = "the engine"):
    """fn(*args) in a spawned child process; its return value (picklable), or Failed with why it has none: fn raised
    (its exception, one line), or the child died without answering (an engine that kills its own process tree on a
    child's failure, SGLang's SIGQUIT handlers, takes only this child with it), or it outlived timeout (then killed)."""
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(sender, fn, args))
    proc.start()
    sender.close()  # the child holds the only sending end: its death ends the pipe
    status, value = "died", None
    try:
        if receiver.poll(timeout):
            try:
                status, value = receiver.recv()
            except EOFError:
                status = "died"
        else:
            status = "timeout"
    finally:
        if status != "ok" and proc.is_alive():
            proc.kill()
        proc.join()
        receiver.close()
    if status == "ok":
        return value
    if status == "error":
        raise _common.Failed(f"{what} failed: {value}")
    if status == "timeout":
        raise _common.Failed(f"{what} did not answer within {timeout:.0f} s (killed)")
    raise _common.Failed(f"{what}'s process died with exit code {proc.exitcode} before answering; its own "
                         f"lines above say why")
