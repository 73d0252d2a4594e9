"""Fingerprint differences between nodes: which fact, what each node has, which nodes are the odd ones out; and
the placement facts, which differ between nodes by design and are only shown (cluster/fact_kinds.py says which)."""

from collections import Counter

from verlenv.cluster.fact_kinds import GPU_IDENTITY, PLACEMENT, kind

ABSENT = None


def _compared(fact: str, fingerprints: dict[str, dict]) -> list[str]:
    if kind(fact) == GPU_IDENTITY:
        return [n for n, fp in fingerprints.items() if fp.get("gpu:count") not in (None, "0")]
    return list(fingerprints)


def _facts(fingerprints: dict[str, dict]) -> list[str]:
    return sorted({fact for fp in fingerprints.values() for fact in fp})


def differences(fingerprints: dict[str, dict]) -> list[dict]:
    """{node: {fact: value}} -> one entry per identity fact whose value is not the same on every node, in fact order.

    A fact one node lacks (a package not installed there) has the value None on that node.
    """
    out = []
    for fact in _facts(fingerprints):
        if kind(fact) == PLACEMENT:
            continue
        values = {n: fingerprints[n].get(fact, ABSENT) for n in _compared(fact, fingerprints)}
        if len(set(values.values())) <= 1:
            continue
        counts = Counter(values.values())
        most = max(counts.values())
        common = [v for v, c in counts.items() if c == most]
        # With a clear majority the others are the odd ones; in a tie every node is named.
        odd = [n for n, v in values.items() if len(common) > 1 or v != common[0]]
        out.append({"fact": fact, "values": values, "odd_nodes": odd})
    return out


def placement(fingerprints: dict[str, dict]) -> list[dict]:
    """The placement facts whose value is not the same on every node, with each node's value: shown, not judged."""
    out = []
    for fact in _facts(fingerprints):
        values = {n: fp.get(fact, ABSENT) for n, fp in fingerprints.items()}
        if kind(fact) == PLACEMENT and len(set(values.values())) > 1:
            out.append({"fact": fact, "values": values})
    return out


def shown(value) -> str:
    return "(absent)" if value is ABSENT else (value if value != "" else '""')
