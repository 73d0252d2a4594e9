"""Read a log at disk speed: RE2 finds the lines worth matching in big blocks; only those reach the matcher.

One RE2 set says which keywords (failures.toml) and which signature contexts ("somewhere in the same log") a
4 MiB block holds, in one pass; a keyword still matches when a line break cuts it (terminal hard wraps,
indented or prefixed soft wraps). Where the block holds keywords, a small automaton of only those finds
where, and each hit's line and the two lines on either side (wrapped messages) are fed to the `Matcher`
with their real line numbers. The result equals feeding every line (tests/doctor/test_doctor_scan.py).
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import BinaryIO

import re2

from verlenv.doctor import knowledge
from verlenv.doctor.knowledge import Failure
from verlenv.doctor.matcher import PREFIX_FORMS, WINDOW, Matcher

BLOCK = 4 << 20  # bytes read at a time; big enough that Python's per-block work is noise
LONGEST_LINE = 16 << 20  # a longer line (binary junk without newlines) keeps only its head
# RE2's default 8 MiB lets the keyword automaton's DFA overflow and fall back to a 100x slower engine.
DFA_MEMORY = 64 << 20
NEIGHBOURS = WINDOW - 1  # lines each side of a hit, so that a message wrapped over WINDOW lines is joined
# ANSI escapes (as the matcher strips them), never across a line break, so that line numbers stay right.
ANSI = re2.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_META = set(r"\.+*?()|[]{}^$-")


def _escape(text: str) -> str:
    return "".join("\\" + c if c in _META else c for c in text)


# A program wraps at spaces, and its logger may put a prefix (timestamp, worker tag) before the next line;
# a terminal cuts anywhere, adding nothing. (A prefix after every cut would overflow RE2's DFA.)
_SPACE = rf"(?:\s|\n(?:\s*(?:{PREFIX_FORMS}))+)+"
_CUT = r"(?:\r?\n)?"


def _literal(text: str) -> str:
    """A keyword as RE2 syntax that still matches when a line break cuts it (hard wrap) or replaces a space."""
    out = []
    for i, c in enumerate(text):
        if c == " ":
            out.append(_SPACE)
            continue
        if i and text[i - 1] != " ":
            out.append(_CUT)
        out.append(_escape(c))
    return "".join(out)


def _options() -> "re2.Options":
    options = re2.Options()
    options.max_mem = DFA_MEMORY
    return options


@dataclass(frozen=True)
class Patterns:
    keywords: tuple[str, ...]  # RE2 sources, each keyword as it may be wrapped
    contexts: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # RE2 source -> signature keys it satisfies
    benign: str | None = None  # failures.toml's benign-line rule: a hit on such a line is no failure...
    on_benign: str | None = None  # ...unless the line holds a keyword of a signature printed that way

    @property
    @cache
    def skip(self) -> tuple:
        """(benign, on_benign) compiled for bytes, or (None, None)."""
        if self.benign is None:
            return None, None
        keep = re2.compile(self.on_benign.encode(), options=_options()) if self.on_benign else None
        return re2.compile(self.benign.encode(), options=_options()), keep

    @lru_cache(maxsize=4)  # each holds up to DFA_MEMORY; a directory's files mostly share one
    def sieve(self, contexts_left: frozenset[int]) -> "re2.Set":
        """One automaton for every keyword and the context entries not seen yet: a block is read once."""
        sieve = re2.Set.SearchSet(_options())
        for src in self.keywords:
            sieve.Add(src.encode())
        for i in sorted(contexts_left):
            sieve.Add(self.contexts[i][0].encode())
        sieve.Compile()
        return sieve

    @lru_cache(maxsize=16)
    def finder(self, present: frozenset[int]) -> "re2._Regexp":
        """The keywords a block holds, to find where: rarely all of them, so a smaller automaton."""
        return re2.compile("|".join(self.keywords[i] for i in sorted(present)).encode(), options=_options())


@cache
def holds_keyword(failures: tuple[Failure, ...] | None = None) -> Callable[[str], object]:
    """A test that a (lower-cased) text holds any keyword, for the matcher's lines: one RE2 search."""
    failures = failures or knowledge.load()
    words = [re2.escape(w) for w in sorted({k for f in failures for k in f.keywords})]
    words += sorted({p for f in failures for p in f.keyword_patterns})
    return re2.compile("|".join(words)).search


@cache
def _patterns(failures: tuple[Failure, ...]) -> Patterns:
    words = sorted({k for f in failures for k in f.keywords}, key=lambda k: (-len(k), k))
    by_context: dict[str, list] = {}
    for f in failures:
        for i, s in enumerate(f.signatures):
            for c in s.context_literals:
                by_context.setdefault("(?i)" + _escape(c), []).append((f.id, i))
            for p in s.context_patterns:
                by_context.setdefault(p.pattern, []).append((f.id, i))
    # A keyword pattern is matched as written, within one line: it is there because its literal part is common.
    patterns = sorted({p for f in failures for p in f.keyword_patterns})
    benign = knowledge.benign()
    kept = sorted({k for f in failures if any(s.on_benign for s in f.signatures) for k in f.keywords})
    return Patterns(tuple(["(?i)" + _literal(w) for w in words] + ["(?i)" + p for p in patterns]),
                    tuple((src, tuple(keys)) for src, keys in by_context.items()),
                    benign.pattern if benign is not None and failures == knowledge.load() else None,
                    "(?i)" + "|".join(_literal(k) for k in kept) if kept else None)


def scan(stream: BinaryIO, matcher: Matcher, failures: Iterable[Failure] | None = None) -> Matcher:
    """Feed `matcher` the lines of `stream` that can hold a known failure; returns the matcher."""
    patterns = _patterns(tuple(failures or knowledge.load()))
    n_keywords = len(patterns.keywords)
    contexts_left = frozenset(range(len(patterns.contexts)))
    base = 0  # lines before this block
    carried = b""  # the previous block's last lines: a keyword may be cut by the line break before this block
    pending = b""  # a line not ended yet
    while True:
        data = stream.read(BLOCK)
        if data:
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # no line end in this read: keep collecting, within reason
                pending = (pending + data)[:LONGEST_LINE]
                continue
            fresh, pending = pending + data[:cut], data[cut:]
        elif pending:
            fresh, pending = pending + b"\n", b""
        else:
            break
        if b"\x1b" in fresh:
            fresh = ANSI.sub(b"", fresh)
        if b"\0" in fresh:  # a log truncated under a writer that does not append starts with a hole of NULs
            fresh = fresh.replace(b"\0", b"")  # the matcher drops them anyway; here they would make one line too long
        block = carried + fresh
        found = patterns.sieve(contexts_left).Match(block) or ()
        keywords = frozenset(i for i in found if i < n_keywords)
        if len(keywords) < len(found):
            left = sorted(contexts_left)
            seen = {left[i - n_keywords] for i in found if i >= n_keywords}
            for i in seen:
                for key in patterns.contexts[i][1]:
                    matcher.saw_context(key)
            contexts_left -= seen
        if keywords:
            _feed_hits(block, base - carried.count(b"\n"), patterns.finder(keywords), matcher, *patterns.skip)
        base += fresh.count(b"\n")
        carried = _last_lines(block)
    return matcher


def _feed_hits(block: bytes, start: int, finder, matcher: Matcher, benign=None, keep=None) -> None:
    """Feed the lines of `block` (whole lines, the first one numbered start + 1) around each keyword hit; a hit on
    a benign line (NCCL's INFO lines, warnings) is passed over, as the matcher would find nothing there."""
    spans: list[list[int]] = []  # [first line, last line, offset of the first line], 0-based in this block
    counted_to, line = 0, 0
    for m in finder.finditer(block):
        line += block.count(b"\n", counted_to, m.start())
        counted_to = m.start()
        if benign is not None and b"\n" not in block[m.start():m.end()]:
            head, end = block.rfind(b"\n", 0, m.start()) + 1, block.find(b"\n", m.end())
            text = block[head:end if end >= 0 else len(block)]
            if benign.search(text) and not (keep is not None and keep.search(text)):
                continue
        first, last = line - NEIGHBOURS, line + block.count(b"\n", m.start(), m.end()) + NEIGHBOURS
        if spans and first <= spans[-1][1] + 1:
            spans[-1][1] = max(spans[-1][1], last)
            continue
        # Offset of the span's first line: back from the hit's own line, never before the block.
        offset = block.rfind(b"\n", 0, m.start()) + 1
        while first < line and offset > 0:
            offset = block.rfind(b"\n", 0, offset - 1) + 1
            line -= 1
            counted_to = offset
        spans.append([line, last, offset])
    for first, last, offset in spans:
        for number in range(first, last + 1):
            end = block.find(b"\n", offset)
            if end < 0:
                break
            matcher.feed(block[offset:end].decode("utf-8", errors="replace"), start + number + 1)
            offset = end + 1


def _last_lines(block: bytes) -> bytes:
    """The last NEIGHBOURS lines of a block that ends with a line break."""
    start = len(block) - 1
    for _ in range(NEIGHBOURS):
        start = block.rfind(b"\n", 0, start)
        if start < 0:
            return block
    return block[start + 1:]
