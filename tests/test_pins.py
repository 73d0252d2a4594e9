"""pins: reading the committed uv locks into exact pins."""

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from verlenv.catalog import pins, stacks
from verlenv.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
CATALOG = stacks.load(ROOT / "stacks.toml")
VARIANTS = CATALOG.all_variants()


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.key)
def test_lock_parses_into_hash_pinned_exact_pins(variant):
    path = pins.lock_path(ROOT, variant)
    locked = pins.read_lock(path)
    top_level = [line for line in path.read_text().splitlines()
                 if line and not line[0].isspace() and not line.startswith("#")]
    assert len(locked) == len(top_level) > 100
    for pin in locked.values():
        assert pin.hashes and all(h.startswith("sha256:") and len(h) == 7 + 64 for h in pin.hashes), pin.name
        assert pin.name == canonicalize_name(pin.name)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.key)
def test_lock_honours_every_pin_of_the_catalog(variant):
    locked = pins.read_lock(pins.lock_path(ROOT, variant))
    for text in variant.requirements:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in locked, f"{variant.key}: {name} is required but not locked"
        assert req.specifier.contains(locked[name].version, prereleases=True), (text, locked[name].version)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.key)
def test_source_builds_are_never_in_the_lock(variant):
    locked = pins.read_lock(pins.lock_path(ROOT, variant))
    assert variant.source_builds
    for build in variant.source_builds:
        assert build.name not in locked


def test_parse_joins_continuations_and_drops_comments():
    text = (
        "# header\n"
        "foo-Bar[extra2,extra1]==1.0 \\\n"
        "    --hash=sha256:" + "a" * 64 + " \\\n"
        "    --hash=sha256:" + "b" * 64 + "\n"
        "    # via baz\n"
        "\n"
        "qux===2.0.post1 --hash=sha256:" + "c" * 64 + "  # trailing comment\n"
    )
    locked = pins.parse_lock(text)
    assert list(locked) == ["foo-bar", "qux"]
    assert locked["foo-bar"] == pins.LockedPin("foo-bar", "1.0", ("sha256:" + "a" * 64, "sha256:" + "b" * 64),
                                               ("extra1", "extra2"))
    assert locked["qux"].version == "2.0.post1"
    assert locked["qux"].requirement == "qux==2.0.post1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("foo>=1.0\n", "not an exact '==' pin"),
        ("foo @ https://example.org/foo-1.0.tar.gz\n", "not an exact '==' pin"),
        ("foo==1.0\nFoo==1.0\n", "pinned twice"),
        ("foo==1.0 --index-url https://example.org/simple\n", "unexpected option '--index-url'"),
        ("==1.0\n", "not a requirement"),
    ],
)
def test_parse_rejects_what_is_not_an_exact_pin(text, expected):
    with pytest.raises(UserError, match=expected) as e:
        pins.parse_lock(text, "locks/x.txt")
    assert str(e.value).startswith("locks/x.txt:")


def test_read_lock_of_a_missing_file_is_one_clear_line(tmp_path):
    with pytest.raises(UserError, match="no such lock; run `verlenv lock`"):
        pins.read_lock(tmp_path / "absent.txt")
