"""family-routing/<family> (verify/group_routing.py): on the megatron actor, whether megatron-core scores a family's
expert groups as vLLM and transformers do, judged on the published config a user gave (before the shrink) and on the
family table's rows; nothing for the fsdp actor or for routing without groups."""

import copy
import importlib.util
import json

import pytest

from test_verify_profiles import REPO
from verlenv.catalog import families
from verlenv.verify import group_routing

_spec = importlib.util.spec_from_file_location("published", REPO / "tests" / "data" / "model-configs" / "published.py")
published = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(published)


def user_row(tmp_path, name: str, **changes) -> dict:
    """A published config (changed as given) the way `--model-config` gives it to verify: shrunk, as a row."""
    values = copy.deepcopy(published.as_published(name))
    values.update(changes)
    path = tmp_path / name / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values))
    table = families.table()
    return table.rows([families.shrink(path, table)])[0]


def checks(rows, actor="megatron"):
    return {r.name: r for r in group_routing.check_group_routing(rows, actor, families.table())}


def test_the_family_tables_rows_route_alike_and_the_earlier_deepseek_row_did_not():
    table = families.table()
    rows = table.rows(list(table.families.values()))
    found = checks(rows)
    assert list(found) == ["family-routing/deepseek-v3"]  # the only row with groups
    assert found["family-routing/deepseek-v3"].status == "pass"
    assert found["family-routing/deepseek-v3"].numbers == {"megatron_group_top": 2, "rollout_group_top": 2}
    earlier = next(r for r in rows if r["name"] == "deepseek-v3")
    earlier = {**earlier, "config": {**earlier["config"], "n_group": 4, "topk_group": 2}}
    [warned] = checks([earlier]).values()
    assert warned.status == "warn" and not warned.required
    assert "2 experts from 2 of 4 groups" in warned.reason and "its top 1 experts" in warned.reason
    assert "vLLM and transformers by its top 2" in warned.reason and "NVIDIA/Megatron-LM#4667" in warned.reason
    assert checks(rows, actor="fsdp") == {}  # transformers' model routes as vLLM does


def test_a_users_published_config_is_judged_before_the_shrink(tmp_path):
    v3 = user_row(tmp_path, "DeepSeek-V3")
    assert (v3["config"]["n_group"], v3["config"]["topk_group"]) == (2, 1)  # shrunk
    [ok] = checks([v3]).values()
    assert ok.status == "pass" and "8 experts from 4 of 8 groups" in ok.reason  # 8 // 4 = 2: as published
    [warned] = checks([user_row(tmp_path, "DeepSeek-V3", topk_group=2)]).values()  # 8 // 2 = 4
    assert warned.status == "warn" and warned.numbers == {"megatron_group_top": 4, "rollout_group_top": 2}


@pytest.mark.parametrize("name, changes, expected", [
    ("Moonlight-16B-A3B", {}, None),  # one group: no group routing
    ("Kimi-K2-Instruct-0905", {}, None),
    ("GLM-4.5", {}, None),
    ("DeepSeek-V2-Lite", {}, None),  # greedy: no groups
    # DeepSeek-V2's own routing (236B): 6 experts from 3 of 8 groups, a group scored by its best expert.
    ("DeepSeek-V2-Lite", {"topk_method": "group_limited_greedy", "n_group": 8, "topk_group": 3}, ("warn", 2, 1)),
    ("GLM-4.5", {"n_group": 4, "topk_group": 2}, ("warn", 4, 2)),  # no topk_method: glm4_moe's own rule
])
def test_which_published_routings_megatron_core_scores_otherwise(tmp_path, name, changes, expected):
    found = list(checks([user_row(tmp_path, name, **changes)]).values())
    if expected is None:
        assert found == []
    else:
        [check] = found
        assert (check.status, check.numbers["megatron_group_top"], check.numbers["rollout_group_top"]) == expected
