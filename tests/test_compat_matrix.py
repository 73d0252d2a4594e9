"""The compatibility matrix (benchmarks/compat_matrix.py) read from reports: the committed GPU reports, and reports a
test writes with family checks, a known upstream failure, a failure and a newer report overriding an older one."""

import json
import sys

from test_verify_profiles import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import compat_matrix  # noqa: E402

from verlenv.catalog import families, stacks  # noqa: E402


def cell(data, stack, variant, mode, family):
    row = next(r for r in data["rows"] if (r["stack"], r["variant"], r["mode"]) == (stack, variant, mode))
    return row["families"][family]


def test_the_committed_reports_give_the_llama_column():
    data = compat_matrix.matrix(REPO / "docs" / "verification", stacks.load(REPO / "stacks.toml"), families.table())
    assert cell(data, "verl-0.9", "fsdp", "thorough", "llama")["status"] == "pass"
    assert cell(data, "verl-0.9", "megatron", "fast", "llama")["status"] == "pass"
    assert cell(data, "verl-0.7", "fsdp", "fast", "llama")["status"] == "pass"  # visit C, with its built flash-attn
    assert cell(data, "verl-0.7", "megatron", "fast", "llama") == {"status": "not run"}
    assert set(families.table().names()) <= set(data["families"])
    # The five families of visit E (H200) trained in verl-0.9's fsdp env, Qwen2.5-VL included. Of the seven 2026 rows:
    # gpt-oss's fsdp report (visit K: vLLM 0.24.0's loader, vllm#45830) is recognised by the row's known issue;
    # visit M (H100): deepseek-v3 passes fast and thorough, qwen3-vl thorough; visit Q (H100): glm4-moe passes;
    # visit R (H100): qwen3.5 passes, qwen3.5-moe and qwen3-next train but fail the rollout/actor agreement bound (on
    # megatron, visit V passed them since with the calibrated models); the rest never ran, and the matrix says so.
    proven = ("llama", "qwen2", "qwen3", "qwen3-moe", "qwen2.5-vl", "deepseek-v3", "glm4-moe", "qwen3.5")
    assert {f: cell(data, "verl-0.9", "fsdp", "fast", f)["status"] for f in proven} == dict.fromkeys(proven, "pass")
    assert {f: cell(data, "verl-0.9", "fsdp", "thorough", f)["status"] for f in ("deepseek-v3", "qwen3-vl")} == \
        dict.fromkeys(("deepseek-v3", "qwen3-vl"), "pass")
    gpt_oss = cell(data, "verl-0.9", "fsdp", "fast", "gpt-oss")
    assert (gpt_oss["status"], gpt_oss["known_issue"]) == ("known*", "https://github.com/vllm-project/vllm/issues/45830")
    failed = ("qwen3.5-moe", "qwen3-next")
    verdicts = {f: cell(data, "verl-0.9", "fsdp", "fast", f)["status"] for f in failed}
    assert verdicts == dict.fromkeys(failed, "fail")
    assert cell(data, "verl-0.9", "fsdp", "fast", "qwen3.5")["report"].endswith("-visit-r.json")
    unproven = [f for f in families.table().names() if f not in (*proven, *failed, "gpt-oss")]
    assert unproven == ["qwen3-vl"]  # its fast fsdp run: not yet (thorough passed, visit M)
    assert {f: cell(data, "verl-0.9", "fsdp", "fast", f)["status"] for f in unproven} == dict.fromkeys(unproven,
                                                                                                       "not run")
    # Megatron (visit F, H200, then visit V, H100): the text families pass; Qwen2.5-VL's failure, counted by visit F's
    # report and recognised since by the family table's megatron known issue, is one visit V's report calls known.
    text = ("llama", "qwen2", "qwen3", "qwen3-moe")
    assert {f: cell(data, "verl-0.9", "megatron", "fast", f)["status"] for f in text} == dict.fromkeys(text, "pass")
    vl = cell(data, "verl-0.9", "megatron", "fast", "qwen2.5-vl")
    assert (vl["status"], vl["known_issue"]) == ("known", "https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/4507")
    # Visit V (H100, the newest report gives the cell): with the calibrated MoE models every megatron family passes but
    # deepseek-v3, which failed step 2's agreement bound (visit S had passed it; visit W passed it again: the cell is
    # visit W's pass, saying that 1 of the model's 3 runs fell below the bound); fsdp trains the published Qwen3-VL-8B
    # config, a column of its own, and megatron the published Qwen3-Next-80B config.
    for family in ("glm4-moe", "qwen3-moe", "qwen3.5", "qwen3.5-moe", "qwen3-next", "qwen3-vl"):
        moe = cell(data, "verl-0.9", "megatron", "fast", family)
        assert (moe["status"], moe["report"].endswith("-visit-v.json"), "same_model" in moe) == ("pass", True, False)
    deepseek = cell(data, "verl-0.9", "megatron", "fast", "deepseek-v3")
    assert deepseek["status"] == "pass"
    assert deepseek["report"] == "2026-12-07-h100-verl-0.9-megatron-deepseek-v3-visit-w.json"
    assert (deepseek["same_model"]["runs"], deepseek["same_model"]["disagreed"]) == (3, 1)
    assert cell(data, "verl-0.9", "megatron", "fast", "config-qwen3-next-80b-a3b-instruct")["status"] == "pass"
    assert cell(data, "verl-0.9", "megatron", "thorough", "qwen3.5")["status"] == "pass"
    assert cell(data, "verl-0.9", "fsdp", "fast", "config-qwen3-vl-8b-instruct")["status"] == "pass"


def report(stack, variant, mode, stamp, checks):
    return {"stack": stack, "variant": variant, "mode": mode, "timestamp": stamp, "checks": checks}


def trainer(variant, family, status, required=True, known=None, log="", numbers=None, reason=""):
    return {"name": f"verl/trainer/{variant}/{family}/grpo-2-steps", "status": status, "required": required,
            "numbers": {"known_issue": known} if known else dict(numbers or {}), "log": log, "reason": reason}


def test_families_known_failures_and_the_newest_report_win(tmp_path):
    url = "https://github.com/verl-project/verl/issues/7899"
    (tmp_path / "a.json").write_text(json.dumps(report("verl-0.9", "fsdp", "fast", "2026-11-26T10:00:00", [
        trainer("fsdp", "qwen3", "fail"), trainer("fsdp", "qwen2.5-vl", "fail", required=False, known=url)])))
    (tmp_path / "b.json").write_text(json.dumps(report("verl-0.9", "fsdp", "fast", "2026-11-26T11:00:00", [
        trainer("fsdp", "qwen3", "pass")])))
    (tmp_path / "notes.json").write_text("[1, 2]")  # not a report: ignored
    data = compat_matrix.matrix(tmp_path, stacks.load(REPO / "stacks.toml"), families.table())
    assert cell(data, "verl-0.9", "fsdp", "fast", "qwen3") == {"status": "pass", "report": "b.json",
                                                               "timestamp": "2026-11-26T11:00:00", "known_issue": ""}
    assert cell(data, "verl-0.9", "fsdp", "fast", "qwen2.5-vl")["status"] == "known"
    md = compat_matrix.markdown(data)
    assert "[known](../verification/a.json)" in md and "[pass](../verification/b.json)" in md


def test_a_counted_failure_is_known_star_only_where_a_known_issue_of_its_variant_recognises_its_output(tmp_path):
    thd = "  File \".../megatron/core/models/common/embeddings/rope_utils.py\", line 235, in _apply_rotary_pos_emb_thd"
    (tmp_path / "a.json").write_text(json.dumps(report("verl-0.9", "megatron", "fast", "2026-11-28T10:00:00", [
        trainer("megatron", "qwen2.5-vl", "fail", log=thd), trainer("megatron", "qwen3", "fail", log=thd)])))
    (tmp_path / "b.json").write_text(json.dumps(report("verl-0.9", "fsdp", "fast", "2026-11-28T10:00:00", [
        trainer("fsdp", "qwen2.5-vl", "fail", log=thd)])))
    data = compat_matrix.matrix(tmp_path, stacks.load(REPO / "stacks.toml"), families.table())
    assert cell(data, "verl-0.9", "megatron", "fast", "qwen2.5-vl")["status"] == "known*"
    assert cell(data, "verl-0.9", "megatron", "fast", "qwen3")["status"] == "fail"  # not that family's issue
    assert cell(data, "verl-0.9", "fsdp", "fast", "qwen2.5-vl")["status"] == "fail"  # not that variant's
    assert "[known*](../verification/a.json) (https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/4507)" in \
        compat_matrix.markdown(data)


def test_a_report_whose_env_left_out_a_package_its_actor_needs_is_no_verdict(tmp_path):
    # GPU visit P: the megatron trainers ran in an env without apex (--skip-package apex) and failed for it. That is
    # no verdict on the stack: the older report's cell stands. Leaving out what the actor does not need (flash-attn:
    # Megatron's attention is TE's) still counts.
    def megatron(stamp, status, skipped):
        out = report("verl-0.9", "megatron", "fast", stamp, [trainer("megatron", "deepseek-v3", status)])
        return {**out, "trainer": {"actor": "megatron", "rollout": "vllm"}, "selection": {"skipped_packages": skipped}}

    (tmp_path / "a.json").write_text(json.dumps(megatron("2026-12-06T10:00:00", "pass", ["flash-attn"])))
    (tmp_path / "b.json").write_text(json.dumps(megatron("2026-12-06T11:00:00", "fail", ["apex", "flash-attn"])))
    data = compat_matrix.matrix(tmp_path, stacks.load(REPO / "stacks.toml"), families.table())
    assert cell(data, "verl-0.9", "megatron", "fast", "deepseek-v3")["report"] == "a.json"
    (tmp_path / "c.json").write_text(json.dumps(megatron("2026-12-06T12:00:00", "fail", ["flash-attn"])))
    data = compat_matrix.matrix(tmp_path, stacks.load(REPO / "stacks.toml"), families.table())
    assert cell(data, "verl-0.9", "megatron", "fast", "deepseek-v3")["status"] == "fail"


def test_a_left_out_package_is_judged_per_family_where_the_need_depends_on_the_familys_attention(tmp_path):
    # The FSDP actor needs flash-attn only where the family's attention is flash_attention_2: gpt-oss (eager) trained
    # without it is a verdict (GPU visit K); llama trained without it is not.
    out = report("verl-0.9", "fsdp", "fast", "2026-12-06T10:00:00",
                 [trainer("fsdp", "gpt-oss", "pass"), trainer("fsdp", "llama", "fail")])
    out = {**out, "trainer": {"actor": "fsdp", "rollout": "vllm"}, "selection": {"skipped_packages": ["flash-attn"]}}
    (tmp_path / "a.json").write_text(json.dumps(out))
    data = compat_matrix.matrix(tmp_path, stacks.load(REPO / "stacks.toml"), families.table())
    assert cell(data, "verl-0.9", "fsdp", "fast", "gpt-oss")["status"] == "pass"
    assert cell(data, "verl-0.9", "fsdp", "fast", "llama")["status"] == "not run"


def test_a_cell_says_how_many_runs_of_its_model_fell_below_the_agreement_bound(tmp_path):
    model = {"init_entropy_mean": 4.313811779022217, "init_logit_std": 1.9943386316299438}
    other = {"init_entropy_mean": 4.312758445739746, "init_logit_std": 1.9945963621139526}
    below = "step 2: rollout/actor probability correlation 0.98078 below 0.99"
    crash = "verl's trainer exited with 1: KeyError: 'layers.1.mlp.gate.e_score_correction_bias'"
    runs = [  # (file, hour, family's trainer check, versions)
        ("a", 8, trainer("megatron", "deepseek-v3", "fail", numbers=other, reason=below), {"vllm": "0.24.0"}),
        ("b", 9, trainer("megatron", "deepseek-v3", "fail", numbers=model, reason=crash), {"vllm": "0.24.0"}),
        ("c", 10, trainer("megatron", "deepseek-v3", "pass", numbers=model), {"vllm": "0.24.0", "flash-attn": None}),
        ("d", 11, trainer("megatron", "deepseek-v3", "fail", numbers=model, reason=below), {"vllm": "0.24.0"}),
        ("e", 12, trainer("megatron", "deepseek-v3", "fail", numbers=model, reason=below), {"vllm": "0.23.0"}),
        ("f", 13, trainer("megatron", "deepseek-v3", "pass", numbers=model), {"vllm": "0.24.0", "flash-attn": "2.8"}),
        ("g", 13, trainer("megatron", "glm4-moe", "pass", numbers=model), {"vllm": "0.24.0"}),
        ("h", 14, trainer("megatron", "glm4-moe", "pass", numbers=model), {"vllm": "0.24.0"})]
    for name, hour, check, versions in runs:
        (tmp_path / f"{name}.json").write_text(json.dumps(
            {**report("verl-0.9", "megatron", "fast", f"2026-12-07T{hour:02}:00:00", [check]), "versions": versions}))
    data = compat_matrix.matrix(tmp_path, stacks.load(REPO / "stacks.toml"), families.table())
    deepseek = cell(data, "verl-0.9", "megatron", "fast", "deepseek-v3")
    # Counted: c, d, f (the same model, the same versions where both have one). Not: a (another model), b (a crash:
    # the env may have been fixed since), e (another vLLM).
    assert (deepseek["status"], deepseek["report"]) == ("pass", "f.json")
    assert deepseek["same_model"] == {"runs": 3, "disagreed": 1, "reports": ["c.json", "d.json", "f.json"]}
    assert "[pass](../verification/f.json) (1 of 3 runs below the agreement bound)" in compat_matrix.markdown(data)
    assert "same_model" not in cell(data, "verl-0.9", "megatron", "fast", "glm4-moe")  # every run agreed


def test_a_report_from_before_its_rows_model_changed_says_so(tmp_path):
    row = families.table().families["deepseek-v3"]
    assert row.model_since == "2026-12-07T23:00:00+00:00"  # 2 groups of 4 since (megatron-core's group score)
    (tmp_path / "a.json").write_text(json.dumps(report("verl-0.9", "fsdp", "fast", "2026-12-07T22:59:59+00:00", [
        trainer("fsdp", "deepseek-v3", "pass"), trainer("fsdp", "glm4-moe", "pass")])))
    (tmp_path / "b.json").write_text(json.dumps(report("verl-0.9", "megatron", "fast", "2026-12-07T23:00:00+00:00", [
        trainer("megatron", "deepseek-v3", "pass")])))
    data = compat_matrix.matrix(tmp_path, stacks.load(REPO / "stacks.toml"), families.table())
    assert cell(data, "verl-0.9", "fsdp", "fast", "deepseek-v3")["earlier_model"] is True
    assert "earlier_model" not in cell(data, "verl-0.9", "fsdp", "fast", "glm4-moe")  # a row with no model_since
    assert "earlier_model" not in cell(data, "verl-0.9", "megatron", "fast", "deepseek-v3")  # run on the row of now
    assert "[pass](../verification/a.json) (the row's earlier model)" in compat_matrix.markdown(data)
    # The committed reports: every deepseek-v3 verdict is the earlier row's until a GPU runs the row of now.
    committed = compat_matrix.matrix(REPO / "docs" / "verification", stacks.load(REPO / "stacks.toml"),
                                     families.table())
    for row_ in committed["rows"]:
        found = row_["families"]["deepseek-v3"]
        assert found["status"] == "not run" or found.get("earlier_model") is True, row_
