"""Which kernels a trainer run really took, read from its output: a library's slow-fallback line (transformers' "The
fast path is not available ...") and the attention backend vLLM's rollout chose. The tables come from verlenv
(data/kernel_paths.toml, handed over in --profile's trainer part as `kernel_paths`); this runs in the env's own
Python, so it needs only the standard library.

Wiring in check_verl_trainer.py, per family and its run's output texts:
    problems += _kernel_paths.slow_paths(texts, paths["fallbacks"], family["name"])
    problems += filter(None, [_kernel_paths.backend_problem(family, paths, profile.arch, texts)])
"""

from __future__ import annotations

import re

# vLLM 0.24.0 logs the backend it chose in one of two lines (vllm/platforms/cuda.py, CudaPlatform.get_attn_backend_cls):
#   logger.info_once("Using %s attention backend out of potential backends: %s.", selected_backend.name, "[...]")
#   logger.info("Using %s backend.", selected_backend)   # a backend the user selected; str() of the enum member
CHOSEN = re.compile(r"Using ([A-Z][A-Z0-9_]*) attention backend out of potential backends: \[")
SELECTED = re.compile(r"Using AttentionBackendEnum\.([A-Z][A-Z0-9_]*) backend\.")


def slow_paths(texts, fallbacks: dict, family: str) -> list[str]:
    """One sentence per fallback line found in `texts` (a run's output): family, component, what it means."""
    found = []
    for key, row in fallbacks.items():
        pattern = re.compile(row["signature"])
        if any(pattern.search(t) for t in texts):
            found.append(f"family {family} trained on a slow path ({key}): {row['says']} "
                         f"[{row['component']} printed {row['signature']!r}]")
    return found


def backends_used(texts) -> list[str]:
    """The attention backends vLLM logged choosing, in order, once each (the rollout's workers log it once each)."""
    out = []
    for text in texts:
        for match in (*CHOSEN.finditer(text), *SELECTED.finditer(text)):
            if match.group(1) not in out:
                out.append(match.group(1))
    return out


def mla_head_size(config: dict) -> int | None:
    """kv_lora_rank + qk_rope_head_dim of an MLA config (in text_config for a multimodal one), else None."""
    for part in (config, config.get("text_config") or {}):
        if "kv_lora_rank" in part and "qk_rope_head_dim" in part:
            return int(part["kv_lora_rank"]) + int(part["qk_rope_head_dim"])
    return None


def expected_backend(rows: list[dict], arch: str, head_size: int | None) -> dict | None:
    """The first row of one attention kind's table (vLLM's order) whose arch and head size conditions hold."""
    for row in rows:
        if row["archs"] and arch not in row["archs"]:
            continue
        if row["head_sizes"] and head_size not in row["head_sizes"]:
            continue
        return row
    return None


def backend_problem(family: dict, paths: dict, arch: str, texts) -> str | None:
    """Why the rollout's attention backend is not the one vLLM should pick for this family on `arch`, in words; None
    when it is, when the family names no attention kind, or where the table was not read for this arch."""
    kind = family.get("attention")
    if not kind or arch not in paths["attention_archs"]:
        return None
    want = expected_backend(paths["attention"][kind], arch, mla_head_size(family.get("config") or {}))
    if want is None:
        return None
    used = backends_used(texts)
    if not used:
        return (f"family {family['name']}'s rollout logged no attention backend (expected {want['backend']} for "
                f"{kind} attention on sm_{arch.replace('.', '')}): vLLM's log lines were not captured or changed")
    if want["backend"] not in used:
        return (f"family {family['name']}'s rollout used backend {', '.join(used)}, not {want['backend']} "
                f"({kind} attention on sm_{arch.replace('.', '')}: {want['why']})")
    return None
