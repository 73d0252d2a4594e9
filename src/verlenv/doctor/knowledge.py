"""The knowledge base: known failures read from `failures.toml`, with their signatures compiled.

Every pattern is compiled with RE2 (google-re2) where it is installed, as the scanner is: RE2 runs in time linear in
the text, so no signature can backtrack on a long line (issue 52: one did, on vLLM's "Model loading took" lines).
A host without google-re2 (the verify path's packages only) falls back to Python's `re`; the patterns are written in
the syntax both share (tests/doctor/test_doctor_re2.py compiles every one with RE2), so a lookaround, which RE2 lacks,
is written as a signature's `unless`.
"""

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from verlenv.errors import UserError

KB_NAME = "failures.toml"


SEVERITIES = ("error", "warning")  # a warning is true but printed by healthy runs too: not a failure
# Context entries without regex syntax are compared as lower-case substrings: much cheaper on every line.
_REGEX_SYNTAX = re.compile(r"[\\^$.|?*+()\[\]{}]")


try:
    import re2 as _engine
except ImportError:  # a GPU host with only the verify path's packages
    _engine = re


@dataclass(frozen=True)
class Signature:
    pattern: re.Pattern
    # At least one of these must appear somewhere in the same log for the signature to count.
    context: tuple[str, ...] = ()
    context_literals: tuple[str, ...] = ()
    context_patterns: tuple[re.Pattern, ...] = ()
    warning: bool = False  # this form of the message is a warning (the family's severity, or its own)
    unless: re.Pattern | None = None  # the text also matches this: not this failure (RE2 has no lookaround)
    on_benign: bool = False  # the failure's message is itself printed as a warning (a benign line's form)


@dataclass(frozen=True)
class Failure:
    id: str
    title: str
    priority: int
    keywords: tuple[str, ...]
    signatures: tuple[Signature, ...]
    cause: str
    fix: tuple[str, ...]
    verlenv: str
    refs: tuple[str, ...]
    severity: str = "error"
    checks: tuple[str, ...] = ()  # probes that test the fix against an env (doctor LOG --python, doctor --ray)
    packages: tuple[str, ...] = ()  # distributions whose installed versions matter to the fix
    # Keywords as (lower-case) regular expressions, for a message whose literal part healthy runs print often
    # (vLLM's "Model loading took" on every start): the scanner then stops only where the whole keyword matches.
    keyword_patterns: tuple[str, ...] = ()


def _options():
    if _engine is re:
        return 0
    options = _engine.Options()
    options.log_errors = False  # the error is ours to report, in one line
    return options


def _compile(text: str, where: str, path: Path) -> re.Pattern:
    if not isinstance(text, str):  # RE2 refuses it with a several-line TypeError: say it in one
        raise UserError(f"{path}: {where}: {text!r} must be a string (a regular expression)")
    try:
        return _engine.compile(text, _options())
    except (re.error, getattr(_engine, "error", re.error), TypeError) as e:
        raise UserError(f"{path}: {where}: bad regular expression {text!r}: {' '.join(str(e).split())}") from None


def _severity(value, where: str, path: Path) -> str:
    if value not in SEVERITIES:
        raise UserError(f"{path}: {where}.severity: {value!r}; valid: {', '.join(SEVERITIES)}")
    return value


def _signature(raw, where: str, path: Path, severity: str) -> Signature:
    if isinstance(raw, str):
        return Signature(_compile(raw, where, path), warning=severity == "warning")
    if isinstance(raw, dict) and isinstance(raw.get("pattern"), str):
        context = tuple(raw.get("context", []))
        literals = tuple(c.lower() for c in context if not _REGEX_SYNTAX.search(c))
        patterns = tuple(_compile(c, f"{where}.context", path) for c in context if _REGEX_SYNTAX.search(c))
        own = _severity(raw.get("severity", severity), where, path)
        unless = _compile(raw["unless"], f"{where}.unless", path) if "unless" in raw else None
        return Signature(_compile(raw["pattern"], where, path), context, literals, patterns, own == "warning",
                         unless, bool(raw.get("on_benign", False)))
    raise UserError(f"{path}: {where}: a signature is a string or a table with 'pattern' (and 'context', 'severity', "
                    "'unless', 'on_benign')")


def parse(data: dict, path: Path) -> tuple[Failure, ...]:
    failures = []
    seen = set()
    entries = data.get("failure", [])
    if not isinstance(entries, list):
        raise UserError(f"{path}: failure must be an array of tables ([[failure]])")
    for i, entry in enumerate(entries):
        where = f"failure[{i}]"
        try:
            fid = entry["id"]
            if not isinstance(fid, str):
                raise UserError(f"{path}: {where}.id must be a string")
            severity = _severity(entry.get("severity", "error"), fid, path)
            failure = Failure(
                id=fid,
                title=entry["title"],
                priority=int(entry["priority"]),
                keywords=tuple(k.lower() for k in entry["keywords"]),
                keyword_patterns=tuple(_compile(k, f"{fid}.keyword_patterns", path).pattern
                                       for k in entry.get("keyword_patterns", [])),
                signatures=tuple(_signature(s, f"{fid}.signatures[{j}]", path, severity)
                                 for j, s in enumerate(entry["signatures"])),
                cause=" ".join(entry["cause"].split()),
                fix=tuple(entry["fix"]),
                verlenv=entry.get("verlenv", ""),
                refs=tuple(entry.get("refs", [])),
                severity=severity,
                checks=tuple(entry.get("checks", [])),
                packages=tuple(entry.get("packages", [])),
            )
        except KeyError as e:
            raise UserError(f"{path}: {where}: missing key {e.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError) as e:
            raise UserError(f"{path}: {where}: malformed "
                            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
        if fid in seen:
            raise UserError(f"{path}: {where}: duplicate id {fid!r}")
        seen.add(fid)
        failures.append(failure)
    if not failures:
        raise UserError(f"{path}: no [[failure]] entries")
    return tuple(failures)


def compile_keyword(source: str) -> re.Pattern:
    """A keyword pattern (failures.toml `keyword_patterns`), searched in lower-cased text."""
    return _engine.compile(source, _options())


def parse_benign(data: dict, path: Path) -> re.Pattern | None:
    """The `[benign]` rule: lines that healthy runs print too (warnings, deprecations, optional-import notes)."""
    lines = data.get("benign", {}).get("lines", [])
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        raise UserError(f"{path}: benign.lines must be a list of regular expressions")
    for i, x in enumerate(lines):
        _compile(x, f"benign.lines[{i}]", path)
    return _compile("|".join(f"(?:{x})" for x in lines), "benign.lines", path) if lines else None


def benign() -> re.Pattern | None:
    """The shipped knowledge base's benign-line rule."""
    return _shipped_benign()


@cache
def _shipped_benign() -> re.Pattern | None:
    ref = resources.files("verlenv") / KB_NAME
    return parse_benign(tomllib.loads(ref.read_text()), Path(str(ref)))


def load(path: Path | None = None) -> tuple[Failure, ...]:
    """The failures of `path`, or of the knowledge base shipped with verlenv."""
    if path is None:
        return _shipped()
    path = Path(path)
    try:
        return parse(tomllib.loads(path.read_text()), path)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: not valid TOML: {e}") from None


@cache
def _shipped() -> tuple[Failure, ...]:
    ref = resources.files("verlenv") / KB_NAME
    return parse(tomllib.loads(ref.read_text()), Path(str(ref)))


def by_id(failure_id: str) -> Failure:
    for f in _shipped():
        if f.id == failure_id:
            return f
    raise KeyError(failure_id)
