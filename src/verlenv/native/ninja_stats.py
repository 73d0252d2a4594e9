"""A build's ninja logs read back: units, compile wall and how well the cores were used."""

from pathlib import Path


def ninja_logs(build_tree: Path) -> list[Path]:
    """Every .ninja_log under the tree: one per extension when setup.py builds several apart (apex does)."""
    return sorted(build_tree.rglob(".ninja_log"))


def _ninja_spans(log: Path) -> list[tuple[int, int, int, str]]:
    """(start ms, end ms, mtime, output) per finished unit; start and end count from that ninja run's start."""
    spans = []
    for line in log.read_text().splitlines():
        parts = line.split("\t")
        if not line.startswith("#") and len(parts) >= 4:
            spans.append((int(parts[0]), int(parts[1]), int(parts[2]), parts[3]))
    return spans


def units_done(build_tree: Path) -> int:
    """How many units the tree's ninja logs record as finished, each output once (a unit rebuilt is one unit)."""
    return len({(log, span[3]) for log in ninja_logs(build_tree) for span in _ninja_spans(log)})


def _union_s(intervals: list[tuple[float, float]]) -> float:
    """Seconds during which at least one interval is open."""
    total, reach = 0.0, None
    for a, b in sorted(intervals):
        if reach is None or a > reach:
            total += b - a
            reach = b
        elif b > reach:
            total += b - reach
            reach = b
    return total


def _runs(spans: list[tuple[int, int, int, str]]) -> list[list[tuple[int, int, int, str]]]:
    # ninja appends a line as each unit finishes, with times from the start of its own run: an end time lower
    # than the one before starts a new run (a resumed build).
    runs: list[list[tuple[int, int, int, str]]] = []
    for span in spans:
        if not runs or span[1] < runs[-1][-1][1]:
            runs.append([])
        runs[-1].append(span)
    return runs


def _epoch_base(run: list[tuple[int, int, int, str]], anchor: int) -> float | None:
    """The run's start on the epoch clock, if the mtime column stamps every unit's start (anchor 0) or end (1)."""
    bases = [span[2] / 1e9 - span[anchor] / 1000 for span in run]
    return min(bases) if max(bases) - min(bases) < 2.0 else None


def _epoch_intervals(logs: list[list[tuple[int, int, int, str]]]) -> list[tuple[float, float]] | None:
    """Every unit's (start, end) on the epoch clock, or None when the logs' mtime column cannot place them.

    The column is the epoch time of each unit's start in some ninja releases and its output's mtime (its end) in
    others. One ninja runs a whole build, so a run of two or more units that fits only one reading decides it.
    """
    if any(span[2] < 10**18 for spans in logs for span in spans):
        return None  # not nanoseconds since the epoch (before 2001): no clock to place the units on
    runs = [run for spans in logs for run in _runs(spans)]
    fits = [anchor for anchor in (0, 1) if all(_epoch_base(run, anchor) is not None for run in runs)]
    if len(fits) != 1:
        return None  # neither reading fits (not a timestamp), or both do (no run tells them apart)
    intervals = []
    for run in runs:
        base = _epoch_base(run, fits[0])
        intervals += [(base + start / 1000, base + end / 1000) for start, end, _, _ in run]
    return intervals


def ninja_stats(build_tree: Path, cores: int) -> dict | None:
    """Per-unit times from the tree's ninja logs: Σ unit time ÷ cores is the ideal wall time; the compile wall
    is the time during which at least one unit was compiling."""
    logs = [spans for spans in map(_ninja_spans, ninja_logs(build_tree)) if spans]
    if not logs:
        return None
    spans = [span for log_spans in logs for span in log_spans]
    total = sum(end - start for start, end, _, _ in spans) / 1000
    # Units of several logs (extensions built at once) or runs (a resumed build) are placed on the epoch clock;
    # without it, one log's runs are timed apart and summed, and several logs cannot be timed together.
    intervals = _epoch_intervals(logs)
    if intervals is not None:
        wall = _union_s(intervals)
    elif len(logs) == 1:
        wall = sum(max(s[1] for s in run) - min(s[0] for s in run) for run in _runs(spans)) / 1000
    else:
        wall = None
    slowest = max(spans, key=lambda s: s[1] - s[0])
    return {
        "units": len(spans),
        "logs": len(logs),
        "runs": max(len(_runs(log_spans)) for log_spans in logs),
        "sum_unit_s": round(total, 1),
        "compile_wall_s": round(wall, 1) if wall is not None else None,
        "ideal_wall_s": round(total / cores, 1),
        "efficiency": round(total / cores / wall, 3) if wall else None,
        "slowest_unit": Path(slowest[3]).name,
        "slowest_unit_s": round((slowest[1] - slowest[0]) / 1000, 1),
    }
