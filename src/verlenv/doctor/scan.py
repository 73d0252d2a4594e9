"""Read a log at disk speed: RE2 finds the lines worth matching in big blocks; only those reach the matcher.

A block's keywords (failures.toml) are searched once with one compiled RE2 automaton that also accepts a
keyword cut by a line break (terminal hard wraps, indented soft wraps). Each hit's line and the two lines on
either side (wrapped messages) are fed to the `Matcher` with their real line numbers. Context entries of
signatures ("somewhere in the same log") are searched over every block with a second automaton that shrinks
as they are found.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import BinaryIO

import re2

from verlenv.doctor import knowledge
from verlenv.doctor.knowledge import Failure
from verlenv.doctor.matcher import WINDOW, Matcher

BLOCK = 4 << 20  # bytes read at a time; big enough that Python's per-block work is noise
LONGEST_LINE = 16 << 20  # a longer line (binary junk without newlines) keeps only its head
NEIGHBOURS = WINDOW - 1  # lines each side of a hit, so that a message wrapped over WINDOW lines is joined
# ANSI escapes (as the matcher strips them), never across a line break, so that line numbers stay right.
ANSI = re2.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_META = set(r"\.+*?()|[]{}^$-")


def _escape(text: str) -> str:
    return "".join("\\" + c if c in _META else c for c in text)


def _literal(text: str) -> str:
    """A keyword as RE2 syntax that still matches when a line break cuts it (hard wrap) or replaces a space."""
    out = [r"\s+" if c == " " else _escape(c) for c in text]
    return r"(?:\r?\n)?".join(out).replace(r"(?:\r?\n)?\s+(?:\r?\n)?", r"\s+")


@dataclass(frozen=True)
class Patterns:
    keywords: "re2._Regexp"
    contexts: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # RE2 source -> signature keys it satisfies


@cache
def _patterns(failures: tuple[Failure, ...]) -> Patterns:
    words = sorted({k for f in failures for k in f.keywords}, key=lambda k: (-len(k), k))
    keywords = re2.compile(("(?i)" + "|".join(_literal(w) for w in words)).encode())
    by_context: dict[str, list] = {}
    for f in failures:
        for i, s in enumerate(f.signatures):
            for c in s.context_literals:
                by_context.setdefault("(?i)" + _escape(c), []).append((f.id, i))
            for p in s.context_patterns:
                by_context.setdefault(p.pattern, []).append((f.id, i))
    return Patterns(keywords, tuple((src, tuple(keys)) for src, keys in by_context.items()))


class _Contexts:
    """The context entries not seen yet, as one automaton rebuilt only when one of them is found."""

    def __init__(self, patterns: Patterns, matcher: Matcher):
        self.matcher = matcher
        self.left = {src: (re2.compile(src.encode()), keys) for src, keys in patterns.contexts}
        self._compile()

    def _compile(self) -> None:
        self.any = re2.compile("|".join(f"(?:{s})" for s in self.left).encode()) if self.left else None

    def search(self, block: bytes) -> None:
        pos = 0
        while self.any is not None and (m := self.any.search(block, pos)):
            line_start = block.rfind(b"\n", 0, m.start()) + 1
            line_end = block.find(b"\n", m.end())
            line = block[line_start:line_end if line_end >= 0 else len(block)]
            found = [src for src, (rx, _) in self.left.items() if rx.search(line)]
            for src in found:
                for key in self.left.pop(src)[1]:
                    self.matcher.saw_context(key)
            self._compile()
            pos = m.start() if found else m.end()


def scan(stream: BinaryIO, matcher: Matcher, failures: Iterable[Failure] | None = None) -> Matcher:
    """Feed `matcher` the lines of `stream` that can hold a known failure; returns the matcher."""
    patterns = _patterns(tuple(failures or knowledge.load()))
    contexts = _Contexts(patterns, matcher)
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
        contexts.search(fresh)
        block = carried + fresh
        start = base - carried.count(b"\n")
        _feed_hits(block, start, patterns.keywords, matcher)
        base += fresh.count(b"\n")
        carried = _last_lines(block)
    return matcher


def _feed_hits(block: bytes, start: int, keywords, matcher: Matcher) -> None:
    """Feed the lines of `block` (whole lines, the first one numbered start + 1) around each keyword hit."""
    nlines = block.count(b"\n")
    spans: list[list[int]] = []  # 0-based line indexes in this block, inclusive, merged
    counted_to, line = 0, 0
    for m in keywords.finditer(block):
        line += block.count(b"\n", counted_to, m.start())
        counted_to = m.start()
        first, last = max(0, line - NEIGHBOURS), line + block.count(b"\n", m.start(), m.end()) + NEIGHBOURS
        if spans and first <= spans[-1][1] + 1:
            spans[-1][1] = max(spans[-1][1], last)
        else:
            spans.append([first, last])
    if not spans:
        return
    lines = block.split(b"\n")
    for first, last in spans:
        for index in range(first, min(last, nlines - 1) + 1):
            matcher.feed(lines[index].decode("utf-8", errors="replace"), start + index + 1)


def _last_lines(block: bytes) -> bytes:
    """The last NEIGHBOURS lines of a block that ends with a line break."""
    start = len(block) - 1
    for _ in range(NEIGHBOURS):
        start = block.rfind(b"\n", 0, start)
        if start < 0:
            return block
    return block[start + 1:]
