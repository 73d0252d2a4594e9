"""Match a log against the known failures: stream lines, unwrap wrapped output, rank what matched.

Ranking rule: a failure's priority (failures.toml) first, then how many lines matched it, then where it first
appeared. A line is credited to one failure only: the highest-priority failure whose signature matches it.
A benign line (failures.toml's [benign]: a warning, a deprecation, an optional-import note, which healthy runs print
too), and the line that continues it, is never evidence, unless a signature says its failure is printed that way.
"""

import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from itertools import pairwise
from typing import BinaryIO

from verlenv.doctor import knowledge, symbols
from verlenv.doctor.knowledge import Failure

# CSI (colours, cursor), OSC (titles, links) and two-byte escapes.
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# Prefixes that loggers put in front of every line; removed so that wrapped text can be joined.
PREFIX_FORMS = (
    r"\d{4}-\d\d-\d\d[T ][\d:.,]+Z?"  # ISO timestamps (CI logs)
    r"|\[rank\d+\]:"  # torchrun
    r"|\([\w:]+ pid=\d+(?:, ip=[\d.]+)?\)"  # Ray / vLLM worker tags
    r"|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d [\d:.]+ (?:\[[\w./ -]+:\d+\])?"  # vLLM logger
    r"|#\d+ \d+\.\d+"  # docker buildkit
    r"|\d{1,5}\.\d{3}(?:\s|$)"  # docker buildkit's summary of a failed step: the time, no step number
)
PREFIX = re.compile(rf"^(?:\s*(?:{PREFIX_FORMS})\s*)+")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
NEW_ERROR = re.compile(r"\s*(?:[\w.]+(?:Error|Exception)|Traceback \(most recent call last\)):")
WINDOW = 3  # lines joined to catch one message wrapped over up to three lines
MAX_LINE = 4000  # longer lines (binary junk, minified output) are cut before matching
SHOWN = 3  # evidence lines shown per failure
HARD_WRAP = 80  # a line this long that continues without indentation was cut by a terminal
SEAM = 40  # characters each side of a line break searched for keywords cut by the break
KEPT = 200  # matches kept per failure; beyond that only counted, so that a huge log cannot fill memory


@dataclass(frozen=True)
class Evidence:
    first: int  # 1-based line numbers in the log
    last: int
    text: str
    file: str = ""  # the log file, when several were read (a directory)
    warning: bool = False  # matched a form of the message that healthy runs print too

    @property
    def where(self) -> str:
        lines = f"L{self.first}" if self.first == self.last else f"L{self.first}-{self.last}"
        return f"{self.file}:{lines}" if self.file else lines


@dataclass
class Diagnosis:
    failure: Failure
    evidence: list[Evidence] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)
    uncounted: int = 0  # matches beyond KEPT, counted but not kept

    @property
    def id(self) -> str:
        return self.failure.id

    @property
    def count(self) -> int:
        return len(self.evidence) + self.uncounted

    @property
    def severity(self) -> str:
        """error unless every line matched a warning form (a healthy run prints it too)."""
        return "warning" if self.evidence and all(e.warning for e in self.evidence) else "error"

    def to_dict(self) -> dict:
        f = self.failure
        return {
            "id": f.id, "title": f.title, "priority": f.priority, "severity": self.severity, "matched": self.count,
            "evidence": [{"lines": [e.first, e.last], "text": e.text} | ({"file": e.file} if e.file else {})
                         for e in self.evidence],
            "details": self.details, "cause": f.cause, "fix": list(f.fix), "verlenv": f.verlenv, "refs": list(f.refs),
            "checks": list(f.checks), "packages": list(f.packages),
        }


def _joins(pieces: list[str], widths: list[int]) -> list[str]:
    """Ways a message wrapped over `pieces` may have read: a terminal cuts at a fixed width inside a word
    (join without a space), a program wraps at word boundaries and indents (join with one space).
    `widths` are the lines' lengths as printed, log prefixes included (the terminal counted those too)."""
    words = pieces[0]
    for (before, after), width in zip(pairwise(pieces), widths, strict=False):
        hard = width >= HARD_WRAP and not after[:1].isspace()
        words += ("" if hard else " ") + after
    spaced = " ".join(pieces)
    out = [" ".join(words.split())]
    if (alt := " ".join(spaced.split())) != out[0]:
        out.append(alt)
    return out


def plain(raw: str) -> str:
    """A log line as shown to the user: no ANSI codes, no control bytes."""
    return CONTROL.sub("", ANSI.sub("", raw[:MAX_LINE])).rstrip()


@dataclass
class _Hit:
    failure: Failure
    signature: int
    first: int
    last: int
    text: str
    groups: dict


@dataclass(frozen=True)
class _Index:
    """What every matcher of one knowledge base looks up; built once, as a directory holds thousands of files."""

    failures: tuple[Failure, ...]  # highest priority first
    context_keys: frozenset
    context_literals: tuple
    context_patterns: tuple
    by_keyword: dict  # keyword -> failures it admits: one pass of substring tests per text, not one per failure
    rank: dict
    keyword_patterns: tuple = ()  # (source, compiled): keywords that are regular expressions
    benign: object = None  # the benign-line rule, or None
    # Every signature in one RE2 set: one pass over a text says which signatures can match, so a line that holds
    # a common keyword costs one search, not one per signature of every failure the keyword admits.
    signature_set: object = None
    signature_keys: tuple = ()


    @staticmethod
    def of(failures: Iterable[Failure], benign=None) -> "_Index":
        ordered = tuple(sorted(failures, key=lambda f: -f.priority))
        by_keyword: dict[str, list[Failure]] = {}
        for f in ordered:
            for k in (*f.keywords, *f.keyword_patterns):
                by_keyword.setdefault(k, []).append(f)
        sources = sorted({k for f in ordered for k in f.keyword_patterns})
        patterns = tuple((k, knowledge.compile_keyword(k)) for k in sources)
        return _Index(
            ordered,
            frozenset((f.id, i) for f in ordered for i, s in enumerate(f.signatures) if s.context),
            tuple((c, (f.id, i)) for f in ordered for i, s in enumerate(f.signatures) for c in s.context_literals),
            tuple((c, (f.id, i)) for f in ordered for i, s in enumerate(f.signatures) for c in s.context_patterns),
            by_keyword, {f.id: n for n, f in enumerate(ordered)}, patterns, benign, *_signature_set(ordered))


def _signature_set(failures: tuple[Failure, ...]) -> tuple:
    """(an RE2 set of every signature, the (failure id, index) of each), or (None, ()) without google-re2."""
    try:
        import re2
    except ImportError:
        return None, ()
    options = re2.Options()
    options.max_mem = 64 << 20  # the default would make the DFA give up on a set this size
    keys, signatures = [], re2.Set.SearchSet(options)
    for f in failures:
        for i, s in enumerate(f.signatures):
            signatures.Add(s.pattern.pattern.encode())
            keys.append((f.id, i))
    signatures.Compile()
    return signatures, tuple(keys)


@cache
def _shipped_index() -> _Index:
    return _Index.of(knowledge.load(), knowledge.benign())


class Matcher:
    """Feed lines one by one (any size of log), then `result()`."""

    def __init__(self, failures: Iterable[Failure] | None = None, contexts_found_elsewhere: bool = False,
                 holds_keyword: Callable[[str], object] | None = None):
        """`contexts_found_elsewhere`: the caller reports contexts with `saw_context` (the scanner searches
        whole blocks for them), so lines need not be searched again. `holds_keyword(lowered)`: a fast test
        (the scanner's RE2) that a text holds any keyword at all, run before the per-keyword tests."""
        self._contexts_found_elsewhere = contexts_found_elsewhere
        self._holds_keyword = holds_keyword
        index = _Index.of(failures) if failures else _shipped_index()
        self.failures = list(index.failures)
        self.lineno = 0
        # (line number, text, signatures matched, keywords, width as printed, benign by itself, benign)
        self._window: deque[tuple[int, str, set, set, int, bool, bool]] = deque(maxlen=WINDOW)
        self._hits: list[_Hit] = []
        self._kept: dict[str, int] = {}
        self._overflow: dict[str, int] = {}
        self._context_keys = index.context_keys
        self._context_literals = index.context_literals
        self._context_patterns = index.context_patterns
        self._context_seen: set[tuple[str, int]] = set()
        self._by_keyword = index.by_keyword
        self._keywords = [k for k in index.by_keyword if k not in dict(index.keyword_patterns)]
        self._keyword_patterns = index.keyword_patterns
        self._benign = index.benign
        self._signature_set = index.signature_set
        self._signature_keys = index.signature_keys
        self._rank = index.rank

    def feed(self, raw: str, lineno: int | None = None) -> None:
        """Match one line; `lineno` (1-based) when lines are skipped, as the scanner does between hits."""
        if lineno is not None:
            if lineno <= self.lineno:
                return  # already fed (a hit's neighbour)
            if lineno != self.lineno + 1:
                self._window.clear()  # never join lines that were not adjacent
            self.lineno = lineno - 1
        self.lineno += 1
        # A carriage return redraws the line (progress bars): match each drawn state.
        for part in raw.rstrip("\r\n").split("\r"):
            shown = plain(part)
            self._feed_text(PREFIX.sub("", shown), shown)

    def _feed_text(self, text: str, shown: str) -> None:
        lowered = text.lower()
        if not self._contexts_found_elsewhere:
            self._check_contexts(text, lowered)
        matched: set[tuple[str, int]] = set()
        # Keywords are compared with runs of spaces squeezed (aligned columns, "size   changed").
        present = self._present(" ".join(lowered.split())) if text else set()
        prev = list(self._window)
        own_benign = bool(self._benign is not None and text and self._benign.search(shown))
        # A benign message that goes on after a colon ("Failed to read commit hash:") goes on on the next line,
        # unless that line starts an error of its own.
        benign = own_benign or bool(prev and prev[-1][5] and prev[-1][1].rstrip().endswith(":")
                                    and not NEW_ERROR.match(text))
        if present:
            self._try(text, present, self.lineno, self.lineno, matched, skip=set(), shown=shown, benign=benign)
        if text:
            # Wrapped output: join with the previous one or two lines, for signatures not matched already.
            for span in (1, 2):
                if len(prev) < span:
                    break
                parts = prev[-span:]
                pieces = [*(p[1] for p in parts), text]
                # Keywords a join can hold: those of its lines, and any cut at a line break.
                seams = "\n".join(a[-SEAM:] + sep + b.lstrip()[:SEAM] for a, b in pairwise(pieces) for sep in ("", " "))
                keywords = present.union(*(p[3] for p in parts)) | self._present(seams.lower())
                if not keywords:
                    continue
                skip = matched.union(*(p[2] for p in parts))
                joined_benign = benign or any(p[6] for p in parts)
                for joined in _joins(pieces, [p[4] for p in parts]):
                    self._try(joined, keywords, parts[0][0], self.lineno, matched, skip, benign=joined_benign)
        self._window.append((self.lineno, text, matched, present, len(shown), own_benign, benign))

    def _present(self, lowered: str) -> set[str]:
        if self._holds_keyword is not None and not self._holds_keyword(lowered):
            return set()
        found = {k for k in self._keywords if k in lowered}
        for k, pattern in self._keyword_patterns:
            if pattern.search(lowered):
                found.add(k)
        return found

    def _try(self, text: str, keywords: set[str], first: int, last: int, matched: set, skip: set,
             shown: str | None = None, benign: bool = False) -> None:
        found = {f.id: f for k in keywords for f in self._by_keyword[k]}
        possible = None  # the signatures the RE2 set says can match this text
        if self._signature_set is not None:
            keys = self._signature_keys
            possible = {keys[n] for n in self._signature_set.Match(text.encode("utf-8", "surrogatepass")) or ()}
            if not possible:
                return
        for f in sorted(found.values(), key=lambda f: self._rank[f.id]):
            for i, sig in enumerate(f.signatures):
                key = (f.id, i)
                if key in skip or key in matched or (benign and not sig.on_benign):
                    continue
                if possible is not None and key not in possible:
                    continue
                m = sig.pattern.search(text)
                if m and sig.unless is not None and sig.unless.search(text):
                    m = None
                if m:
                    matched.add(key)
                    if self._kept.get(f.id, 0) >= KEPT:
                        self._overflow[f.id] = self._overflow.get(f.id, 0) + 1
                        continue
                    self._kept[f.id] = self._kept.get(f.id, 0) + 1
                    groups = {k: v for k, v in m.groupdict().items() if v}
                    self._hits.append(_Hit(f, i, first, last, (shown or text).strip(), groups))

    def _check_contexts(self, text: str, lowered: str) -> None:
        seen = self._context_seen
        if len(seen) == len(self._context_keys):
            return
        for literal, key in self._context_literals:
            if literal in lowered and key not in seen:
                seen.add(key)
        for pattern, key in self._context_patterns:
            if key not in seen and pattern.search(text):
                seen.add(key)

    def saw_context(self, key: tuple[str, int]) -> None:
        """A signature's context appeared in the log (found by the scanner, outside the lines fed)."""
        self._context_seen.add(key)

    def result(self, file: str = "") -> list["Diagnosis"]:
        valid = [h for h in self._hits if not h.failure.signatures[h.signature].context
                 or (h.failure.id, h.signature) in self._context_seen]
        # Credit each line to the highest-priority failure that matched it.
        owner: dict[int, int] = {}
        for h in valid:
            for line in range(h.first, h.last + 1):
                owner[line] = max(owner.get(line, -1), h.failure.priority)
        diagnoses: dict[str, Diagnosis] = {}
        seen_lines: dict[str, set] = {}
        for h in sorted(valid, key=lambda h: (h.first, h.last)):
            if any(owner[line] > h.failure.priority for line in range(h.first, h.last + 1)):
                continue
            d = diagnoses.setdefault(h.failure.id, Diagnosis(h.failure))
            lines = seen_lines.setdefault(h.failure.id, set())
            if (h.first, h.last) not in lines:
                lines.add((h.first, h.last))
                d.evidence.append(Evidence(h.first, h.last, h.text, file, h.failure.signatures[h.signature].warning))
            for k, v in h.groups.items():
                d.details.setdefault(k, v)
        for fid, extra in self._overflow.items():
            if fid in diagnoses:
                diagnoses[fid].uncounted = extra
        return ranked(list(diagnoses.values()))


def ranked(diagnoses: list[Diagnosis]) -> list[Diagnosis]:
    """Failures before warnings; then priority, matched lines, first appearance."""
    out = sorted(diagnoses, key=lambda d: (d.severity == "warning", -d.failure.priority, -d.count, d.evidence[0].first))
    _explain_symbols(out)
    return out


def merged(per_file: Iterable[list[Diagnosis]]) -> list[Diagnosis]:
    """One diagnosis per failure over several logs (a directory), the evidence of each kept with its file."""
    by_id: dict[str, Diagnosis] = {}
    for diagnoses in per_file:
        for d in diagnoses:
            into = by_id.setdefault(d.id, Diagnosis(d.failure))
            room = max(0, KEPT - len(into.evidence))
            into.evidence.extend(d.evidence[:room])
            into.uncounted += d.uncounted + max(0, len(d.evidence) - room)
            for k, v in d.details.items():
                into.details.setdefault(k, v)
    return ranked(list(by_id.values()))


def _explain_symbols(diagnoses: list[Diagnosis]) -> None:
    names = [d.details["symbol"] for d in diagnoses if "symbol" in d.details]
    readable = symbols.demangle(names)
    for d in diagnoses:
        if sym := d.details.get("symbol"):
            d.details["demangled"] = readable[sym]
            d.details["abi"] = symbols.abi_hint(sym, readable[sym])


def lines_of(stream: BinaryIO) -> Iterator[str]:
    """Lines of a byte stream, decoded leniently (binary junk becomes U+FFFD)."""
    for raw in stream:
        yield raw.decode("utf-8", errors="replace")


def diagnose_lines(lines: Iterable[str], failures: Iterable[Failure] | None = None) -> list[Diagnosis]:
    """Every line through the matcher: the reference that the fast scanner (scan.py) must agree with."""
    m = Matcher(failures)
    for line in lines:
        m.feed(line)
    return m.result()


def format_diagnoses(diagnoses: list[Diagnosis], source: str = "log") -> str:
    """Plain-text report: each failure once, with the lines that matched, the cause and the fix."""
    if not diagnoses:
        return f"no known failure matched in {source}"
    failures = sum(d.severity == "error" for d in diagnoses)
    warnings = len(diagnoses) - failures
    head = f"{failures} known failure{'s' if failures != 1 else ''}"
    if warnings:
        head += f" and {warnings} warning{'s' if warnings != 1 else ''} (printed by healthy runs too)"
    out = [f"{head} in {source} (most specific first):"]
    for d in diagnoses:
        f = d.failure
        out.append("")
        out.append(f"[{f.id}] {f.title}" + (" (warning)" if d.severity == "warning" else ""))
        out.append(f"  matched {d.count} line{'s' if d.count != 1 else ''}:")
        for e in d.evidence[:SHOWN]:
            text = e.text if len(e.text) <= 200 else e.text[:197] + "..."
            out.append(f"    {e.where}: {text}")
        if d.count > SHOWN:
            out.append(f"    ... and {d.count - SHOWN} more")
        if "demangled" in d.details:
            out.append(f"  missing symbol: {d.details['demangled']}")
            out.append(f"    {d.details['abi']}")
        shown = {k: v for k, v in d.details.items() if k not in ("symbol", "demangled", "abi")}
        if shown:
            out.append("  found: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
        out.append(f"  cause: {f.cause}")
        out.append("  fix:")
        out.extend(f"    {step}" for step in f.fix)
        if f.verlenv:
            out.append(f"  verlenv: {f.verlenv}")
        if f.refs:
            out.append(f"  seen in: {', '.join(f.refs)}")
    return "\n".join(out)
