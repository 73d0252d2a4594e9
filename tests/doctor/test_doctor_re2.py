"""The doctor's patterns run in linear time (RE2), benign lines never become failures, and the 2026 evaluation set
keeps its split (issue 52)."""

import hashlib
import io
import sys
from pathlib import Path

import pytest
import re2

from test_doctor_match import LOGS, excerpt, expected_id
from verlenv.doctor import diagnose_text, knowledge, scan
from verlenv.doctor.matcher import Matcher, diagnose_lines
from verlenv.errors import UserError

FRESH = LOGS / "heldout-2026"
FRESH_DEV = sorted((FRESH / "dev").glob("*.log"))
QUIET_DEV = [p for p in FRESH_DEV if p.name.startswith(("benign-", "healthy-"))]


def every_pattern() -> list[tuple[str, str]]:
    """(where, source) of every regular expression the knowledge base holds."""
    out = []
    for f in knowledge.load():
        out += [(f"{f.id}.keyword_patterns", k) for k in f.keyword_patterns]
        for i, s in enumerate(f.signatures):
            out.append((f"{f.id}.signatures[{i}]", s.pattern.pattern))
            out += [(f"{f.id}.signatures[{i}].unless", s.unless.pattern)] if s.unless else []
            out += [(f"{f.id}.signatures[{i}].context", c.pattern) for c in s.context_patterns]
    return out + [("benign", knowledge.benign().pattern)]


def test_every_pattern_compiles_under_re2():
    options = re2.Options()
    options.log_errors = False
    bad = []
    for where, source in every_pattern():
        try:
            re2.compile(source, options)
        except re2.error as e:
            bad.append(f"{where}: {source!r}: {e}")
    assert not bad, "\n".join(bad)


def test_the_signatures_are_compiled_with_re2():
    kinds = {type(s.pattern) for f in knowledge.load() for s in f.signatures}
    assert kinds == {type(re2.compile("x"))}


def one_failure(tmp_path, keyword: str, signature: str):
    """A failures.toml of one entry, X1, whose one signature is `signature` (TOML)."""
    kb = tmp_path / "failures.toml"
    kb.write_text(f"""[[failure]]
id = "X1"
title = "t"
priority = 50
keywords = ["{keyword}"]
signatures = [{signature}]
cause = "c"
fix = ["f"]
refs = ["r"]
""")
    return kb


@pytest.mark.parametrize("pattern", [
    r"took .*?(?<![\d.])(?P<seconds>\d{3,}) seconds",  # the lookbehind S5 had
    r"No module named '(?:vllm)\.(?!_C')\w+'",  # a lookahead
    r"requires (?P<p>ray) but you have (?P=p)",  # a back-reference
])
def test_a_pattern_that_needs_backtracking_is_refused_in_one_line(tmp_path, pattern):
    kb = one_failure(tmp_path, "took", f"'''{pattern}'''")
    with pytest.raises(UserError, match=r"X1\.signatures\[0\]: bad regular expression") as e:
        knowledge.load(kb)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("signature, where", [
    ("{ pattern = 'undefined symbol', unless = 0 }", r"X1\.signatures\[0\]\.unless: 0 must be a string"),
    ("{ pattern = 'undefined symbol', unless = ['a'] }", r"X1\.signatures\[0\]\.unless: \['a'\] must be a string"),
])
def test_a_regular_expression_that_is_no_string_is_refused_in_one_line(tmp_path, signature, where):
    # The reliability suite's mutated failures.toml found it: RE2 refuses an int with a TypeError of several lines.
    kb = one_failure(tmp_path, "symbol", signature)
    with pytest.raises(UserError, match=where) as e:
        knowledge.load(kb)
    assert "\n" not in str(e.value)


def test_model_loading_lines_of_every_vllm_start_do_not_stop_the_scanner():
    fed = []

    class Counting(Matcher):
        def feed(self, raw, lineno=None):
            fed.append(lineno)
            super().feed(raw, lineno)

    quick = (b"(WorkerDict pid=20001) INFO 03-10 08:07:20 [gpu_model_runner.py:1067] Model loading took 0.2389 GiB "
             b"and 0.977005 seconds\n(WorkerDict pid=20001) INFO 03-10 08:07:21 [default_loader.py:262] Loading "
             b"weights took 12.05 seconds\n")
    slow = b"INFO 03-10 09:07:20 [gpu_model_runner.py:1067] Model loading took 61.2 GiB and 1264.5 seconds\n"
    matcher = scan.scan(io.BytesIO(quick * 5000 + slow), Counting(contexts_found_elsewhere=True))
    assert len(fed) <= 3, f"{len(fed)} lines reached the matcher"
    (d,) = matcher.result()
    assert d.id == "S5" and d.details["seconds"] == "1264"


@pytest.mark.parametrize("path", QUIET_DEV, ids=lambda p: p.name)
def test_benign_and_healthy_lines_of_real_logs_raise_nothing(path):
    assert diagnose_text(excerpt(path)) == []


def test_a_benign_line_is_no_evidence_but_a_failure_printed_as_a_warning_still_is():
    optional = ("/x/vllm/connections.py:8: RuntimeWarning: Failed to read commit hash:\n"
                "No module named 'vllm._version'\n  from vllm.version import __version__ as VLLM_VERSION\n")
    assert diagnose_text(optional) == []
    # the same module missing outside a warning is a version skew between verl and the engine
    assert [d.id for d in diagnose_text("ModuleNotFoundError: No module named 'vllm.worker'\n")] == ["F14"]
    # apex says it in a "Warning:", and it is true of the env (on_benign in failures.toml)
    apex = excerpt(LOGS / "F6b-apex-573-warning.log")
    assert [d.id for d in diagnose_text(apex)][:1] == ["F6b"]


def test_the_fresh_set_is_split_by_the_sha256_of_its_thread():
    sides = {}
    for side in ("dev", "heldout"):
        for p in sorted((FRESH / side).glob("*.log")):
            with open(p) as f:  # the header only: the held-out half's excerpts are not read here
                url = f.readline().split()[2]
            assert side == ("dev" if hashlib.sha256(url.encode()).digest()[0] % 2 == 0 else "heldout"), p.name
            assert url not in sides, f"{url} is on both sides"
            sides[url] = side
    assert len(sides) >= 50 and set(sides.values()) == {"dev", "heldout"}


def test_fresh_dev_failures_are_named_by_their_kind():
    failing = [p for p in FRESH_DEV if p not in QUIET_DEV]
    assert {expected_id(p) for p in failing} <= {f.id for f in knowledge.load()}
    for p in failing:
        assert [d.id for d in diagnose_text(excerpt(p))][:1] == [expected_id(p)], p.name


def test_a_signature_unless_drops_the_match():
    # F14's pattern matches, its `unless` (the lookahead it had) drops it: vllm._C missing is not a version skew
    assert [d.id for d in diagnose_text("ModuleNotFoundError: No module named 'vllm._C'\n")] == []


def test_nccl_info_lines_do_not_stop_the_scanner():
    fed = []

    class Counting(Matcher):
        def feed(self, raw, lineno=None):
            fed.append(lineno)
            super().feed(raw, lineno)

    plugin = (b"node1:27907:27907 [1] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open "
              b"shared object file: No such file or directory : when loading libnccl-net.so\n")
    missing = b"ImportError: libcudart.so.13: cannot open shared object file: No such file or directory\n"
    matcher = scan.scan(io.BytesIO(plugin * 20000 + missing), Counting(contexts_found_elsewhere=True))
    assert len(fed) <= 3, f"{len(fed)} lines reached the matcher"
    assert [d.id for d in matcher.result()] == ["F15"]


def test_the_scanner_finds_what_every_line_finds_on_a_verl_run_log(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from doctor_runlog import make_run_log

    log = tmp_path / "run.log"
    make_run_log(log, 300_000, seed=5)
    text = log.read_text()
    found = diagnose_text(text)
    assert [(d.id, [(e.first, e.last) for e in d.evidence]) for d in found] == \
           [(d.id, [(e.first, e.last) for e in d.evidence]) for d in diagnose_lines(text.splitlines())]
    assert [d.id for d in found] == ["F10"]  # the failing line at its end, nothing from the healthy lines


def test_an_error_right_after_a_benign_line_is_still_an_error():
    log = ("/x/torch/utils/cpp_extension.py:1: FutureWarning: this option is deprecated:\n"
           "ImportError: /x/sgl_kernel/common_ops.abi3.so: undefined symbol: cuGreenCtxStreamCreate\n")
    assert [d.id for d in diagnose_text(log)] == ["F58"]
