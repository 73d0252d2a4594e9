"""family-routing/<family>: on the megatron actor, whether megatron-core chooses a token's expert groups as the
rollout does. In group-limited routing (DeepSeek-V3: 8 of 256 experts, from 4 of 8 groups) each group is scored by the
sum of its top experts' scores. Transformers and vLLM take a number fixed by the architecture (families.toml
defaults.group_score_top: 2 for DeepSeek-V3, 1 for DeepSeek-V2's greedy groups); megatron-core 0.18.2 takes
num_experts_per_tok // topk_group. Where the two differ, the actor trains on other experts than the rollout sampled
from for some tokens, and the rollout/actor agreement drops (GPU visits S, V, W: verify's own deepseek-v3 row, 2 // 2,
agreed at pearson 0.991-0.994 before any update; docs/benchmarks/router-agreement-cpu-earlier-row.json). The fsdp actor
is transformers' model and routes as vLLM does.

Judged from the user's published config (before `--model-config` shrank it: the shrink keeps the two rules alike),
so a user learns what their own model would do on the megatron actor."""

from verlenv.catalog import families
from verlenv.verify.results import CheckResult

KEYS = ("n_group", "topk_group", "num_experts_per_tok", "topk_method", "model_type")
UPSTREAM = "NVIDIA/Megatron-LM#4667 (open) would make megatron-core's number a setting"


def megatron_group_top(num_experts_per_tok: int, topk_group: int) -> int:
    """How many of a group's experts megatron-core 0.18.2 sums to score it (moe_utils.group_limited_topk)."""
    return max(1, num_experts_per_tok // topk_group)


def published(row: dict) -> dict:
    """The routing keys as the row's config had them before a shrink (`shrunk` records [published, shrunk])."""
    config = row["config"]
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    where = "text_config." if text is not config else ""
    out = {}
    for key in KEYS:
        changed = (row.get("shrunk") or {}).get(where + key)
        out[key] = changed[0] if isinstance(changed, list) and changed else text.get(key, config.get(key))
    return out


def rollout_top(routing: dict, table: dict) -> int | None:
    """How many of a group's experts transformers and vLLM sum to score it; None for routing they do not group."""
    if routing["topk_method"] in table["by_method"]:
        return table["by_method"][routing["topk_method"]]
    return None if routing["topk_method"] else table["by_type"].get(routing["model_type"])


def check_group_routing(rows: list[dict], actor: str, table: families.Table) -> list[CheckResult]:
    """One check per family with group-limited routing, on the megatron actor only (warn where the rules differ)."""
    if actor != "megatron":
        return []
    out = []
    for row in rows:
        r = published(row)
        groups, chosen, topk = r["n_group"], r["topk_group"], r["num_experts_per_tok"]
        rollout = rollout_top(r, table.defaults["group_score_top"])
        if rollout is None or not all(isinstance(v, int) and v > 0 for v in (groups, chosen, topk)) or groups < 2:
            continue
        megatron = megatron_group_top(topk, chosen)
        name, shape = f"family-routing/{row['name']}", f"{topk} experts from {chosen} of {groups} groups"
        numbers = {"megatron_group_top": megatron, "rollout_group_top": rollout}
        if megatron == rollout:
            out.append(CheckResult(name, "megatron-core", "static", "pass", f"family {row['name']} ({shape}): "
                                   f"megatron-core scores a group by its top {megatron}, as vLLM does",
                                   numbers=numbers))
            continue
        out.append(CheckResult(name, "megatron-core", "static", "warn", (
            f"family {row['name']} ({shape}): megatron-core scores a group by its top {megatron} experts "
            f"(num_experts_per_tok // topk_group), vLLM and transformers by its top {rollout}: on the megatron actor "
            f"some tokens train on other experts than the rollout sampled from, and the rollout/actor agreement drops "
            f"(the fsdp actor routes as vLLM does; {UPSTREAM})"), numbers=numbers))
    return out
