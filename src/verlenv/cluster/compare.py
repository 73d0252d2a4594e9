"""Fingerprint differences between nodes: which fact, what each node has, which nodes are the odd ones out."""

from collections import Counter

# Facts about a node's GPUs: a CPU-only node (often the Ray head) has none, which is normal, so these are
# compared among the nodes that have GPUs.
GPU_FACTS = ("gpu:", "env:CUDA_VISIBLE_DEVICES")
ABSENT = None


def _compared(fact: str, fingerprints: dict[str, dict]) -> list[str]:
    if fact.startswith(GPU_FACTS):
        return [n for n, fp in fingerprints.items() if fp.get("gpu:count") not in (None, "0")]
    return list(fingerprints)


def differences(fingerprints: dict[str, dict]) -> list[dict]:
    """{node: {fact: value}} -> one entry per fact whose value is not the same on every node, in fact order.

    A fact one node lacks (a package not installed there) has the value None on that node.
    """
    facts = sorted({fact for fp in fingerprints.values() for fact in fp})
    out = []
    for fact in facts:
        nodes = _compared(fact, fingerprints)
        values = {n: fingerprints[n].get(fact, ABSENT) for n in nodes}
        if len(set(values.values())) <= 1:
            continue
        counts = Counter(values.values())
        most = max(counts.values())
        common = [v for v, c in counts.items() if c == most]
        # With a clear majority the others are the odd ones; in a tie every node is named.
        odd = [n for n, v in values.items() if len(common) > 1 or v != common[0]]
        out.append({"fact": fact, "values": values, "odd_nodes": odd})
    return out


def shown(value) -> str:
    return "(absent)" if value is ABSENT else (value if value != "" else '""')
