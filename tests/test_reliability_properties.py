"""Property tests of the parsers a user's files go through (catalog, recipes, locks and their records, the
failures knowledge base, logs, the arch list): whatever the input, a parser returns its result or raises one
UserError line, never another exception; and what it accepts means what it says."""

import copy
import functools
import json
import shutil
import tomllib
from pathlib import Path

import pytest
import tomlkit
from hypothesis import HealthCheck, example, given, settings, strategies as st

from reliability_log import record
from verlenv import validate
from verlenv.catalog import pins, stacks
from verlenv.doctor import diagnose_lines, knowledge
from verlenv.errors import UserError
from verlenv.lock import locks
from verlenv.native import recipes

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Any TOML value: what a hand-edited file can hold where the parser expects something else.
toml_values = st.recursive(
    st.one_of(st.text(max_size=12), st.integers(-5, 10**6), st.booleans(),
              st.floats(allow_nan=False, allow_infinity=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=3)),
    max_leaves=6,
)


def _paths(data, prefix=()):
    """Every key path of a nested dict (lists by index)."""
    out = []
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else []
    for key, value in items:
        out.append((*prefix, key))
        out += _paths(value, (*prefix, key))
    return out


@st.composite
def mutated(draw, original: dict):
    """The original document with a few of its values replaced by any TOML value, or removed."""
    data = copy.deepcopy(original)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        if draw(st.booleans()):
            parent[path[-1]] = draw(toml_values)
        elif isinstance(parent, dict):
            del parent[path[-1]]
    return data


def recorded(parser: str):
    """Note the property's outcome (all its examples) for docs/reliability.md."""
    def wrap(test):
        @functools.wraps(test)
        def run(*args, **kwargs):
            try:
                test(*args, **kwargs)
            except BaseException as e:
                record("property", parser,
                       f"counterexample: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}", False)
                raise
            record("property", parser, f"{SETTINGS.max_examples} examples: a result, or one UserError line", True)
        return run
    return wrap


def _only_user_errors(parse, *args):
    try:
        return parse(*args)
    except UserError as e:
        assert "\n" not in str(e), str(e)
        return None


CATALOG = tomllib.loads((ROOT / "stacks.toml").read_text())


@recorded('catalog: stacks.toml with values replaced or removed')
@SETTINGS
@given(mutated(CATALOG))
def test_catalog_parser_accepts_or_says_one_line(data):
    cat = _only_user_errors(stacks.parse, Path("stacks.toml"), data)
    if cat is not None:
        # What it accepted is what the document says.
        assert cat.default == data["default"] and set(cat.stacks) == set(data["stacks"])


@recorded('catalog: a stacks.toml of any bytes')
@SETTINGS
@given(st.binary(max_size=400))
@example(b"\xff\xfe" + "default = 1".encode("utf-16-le"))
def test_catalog_file_of_any_bytes(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("cat") / "stacks.toml"
    path.write_bytes(blob)
    _only_user_errors(stacks.load, path)


RECIPE_NAMES = sorted(p.parent.name for p in (ROOT / "recipes").glob("*/recipe.toml"))


@recorded('recipes: recipe.toml with values replaced or removed')
@SETTINGS
@given(st.sampled_from(RECIPE_NAMES).flatmap(
    lambda n: st.tuples(st.just(n), mutated(tomllib.loads((ROOT / "recipes" / n / "recipe.toml").read_text())))))
def test_recipe_parser_accepts_or_says_one_line(tmp_path_factory, named):
    name, data = named
    root = tmp_path_factory.mktemp("recipes")
    (root / "recipes" / name).mkdir(parents=True)
    (root / "recipes" / name / "recipe.toml").write_text(tomlkit.dumps(data))
    recipe = _only_user_errors(recipes.load, root, name)
    if recipe is not None:
        assert recipe.package == data["package"] and recipe.mem_per_job_gib == float(data["build"]["mem_per_job_gib"])


pin_names = st.from_regex(r"[a-z][a-z0-9]{0,6}([-_.][a-z0-9]{1,4})?", fullmatch=True)
versions = st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,3}", fullmatch=True)
digests = st.from_regex(r"[0-9a-f]{64}", fullmatch=True)


@recorded('locks: a uv-style lock of any pins reads back as exactly them')
@SETTINGS
@given(st.dictionaries(pin_names, st.tuples(versions, st.lists(digests, min_size=1, max_size=3)), max_size=8))
def test_lock_round_trip(locked):
    """A lock written as `uv pip compile` writes it reads back as exactly its pins."""
    text = "# This file was autogenerated by uv\n" + "".join(
        f"{name}=={version} \\\n" + " \\\n".join(f"    --hash=sha256:{d}" for d in hashes) + "\n    # via -r in.txt\n"
        for name, (version, hashes) in locked.items())
    canon = {}
    for name, value in locked.items():
        canon.setdefault(pins.canonicalize_name(name), value)
    if len(canon) < len(locked):  # two spellings of one name: a lock may not pin it twice
        with pytest.raises(UserError, match="pinned twice"):
            pins.parse_lock(text)
        return
    parsed = pins.parse_lock(text)
    assert {n: (p.version, list(p.hashes)) for n, p in parsed.items()} == {
        n: (v, [f"sha256:{d}" for d in h]) for n, (v, h) in canon.items()}


@recorded('locks: any text')
@SETTINGS
@given(st.text(max_size=300))
def test_lock_parser_of_any_text(text):
    _only_user_errors(pins.parse_lock, text)


@pytest.fixture(scope="module")
def fresh_project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project")
    shutil.copy(ROOT / "stacks.toml", root / "stacks.toml")
    shutil.copytree(ROOT / "locks", root / "locks")
    return root


@recorded('`lock --check` / install: any lock bytes and inputs record')
@SETTINGS
@given(lock_bytes=st.one_of(st.none(), st.binary(max_size=200)),
       record_bytes=st.one_of(st.none(), st.binary(max_size=200),
                              st.dictionaries(st.sampled_from(["lock_sha256", "inputs_sha256", "inputs"]), toml_values,
                                              max_size=3)
                              .map(lambda d: json.dumps(d).encode())))
def test_lock_check_of_any_lock_and_record(fresh_project, lock_bytes, record_bytes):
    """`lock --check` and install's check read whatever lies in locks/: each problem is one line, never a crash."""
    cat = stacks.load(fresh_project / "stacks.toml")
    variant = cat.variant(None, "fsdp")
    lock_file, side = pins.lock_path(cat.root, variant), locks.inputs_path(cat.root, variant)
    saved = lock_file.read_bytes(), side.read_bytes()
    try:
        for path, blob in ((lock_file, lock_bytes), (side, record_bytes)):
            if blob is not None:
                path.write_bytes(blob)
        problems = locks.lock_problems(cat, variant)
        assert all(isinstance(p, str) and "\n" not in p for p in problems)
        # The committed pair is fresh; any other bytes are a problem to report.
        assert bool(problems) == (lock_bytes is not None or record_bytes is not None)
    finally:
        lock_file.write_bytes(saved[0])
        side.write_bytes(saved[1])


FAILURES = tomllib.loads((ROOT / "src" / "verlenv" / "failures.toml").read_text())


@recorded('failures.toml with values replaced or removed')
@SETTINGS
@given(mutated({"failure": FAILURES["failure"][:3]}))
def test_failures_parser_accepts_or_says_one_line(data):
    parsed = _only_user_errors(knowledge.parse, data, Path("failures.toml"))
    if parsed is not None:
        assert [f.id for f in parsed] == [e["id"] for e in data["failure"]]


LOG_LINES = [line for log in sorted((ROOT / "tests" / "data" / "logs").glob("*.log"))[:6]
             for line in log.read_text(errors="replace").splitlines()[:200]]


@recorded('logs: any lines, real failure lines mixed in')
@SETTINGS
@given(st.lists(st.one_of(st.text(max_size=120), st.sampled_from(LOG_LINES)), max_size=60))
def test_log_matcher_of_any_lines(lines):
    """Any log, with real failure lines mixed in anywhere: diagnosed without error, and the same twice."""
    first = [d.failure.id for d in diagnose_lines(iter(lines))]
    assert first == [d.failure.id for d in diagnose_lines(iter(lines))]


arch = st.from_regex(r"[0-9]{1,2}\.[0-9][af]?(\+PTX)?", fullmatch=True)


@recorded('--archs: any list of archs reads back as itself')
@SETTINGS
@given(st.lists(arch, min_size=1, max_size=4))
def test_arch_list_round_trip(archs):
    assert validate.archs(";".join(archs)) == list(dict.fromkeys(archs))


@recorded('--archs: any text')
@SETTINGS
@given(st.text(max_size=20))
@example("x;;9")
@example("8.0;")
def test_arch_list_of_any_text(text):
    parsed = _only_user_errors(validate.archs, text)
    assert parsed is None or all(validate.ARCH.match(a) for a in parsed)
