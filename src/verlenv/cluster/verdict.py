"""The cluster's verdict from what the driver gathered: each node's problems, and the exit code. The driver uses it
to decide whether the cluster is sound enough for verl's trainer to run across it; the report uses it to judge."""

TRAINER_FAILED = ("fail", "refused")  # the trainer ran and failed, or the cluster cannot run it as one job


def node_problems(row: dict) -> list[str]:
    if row["state"] != "checked":
        return [f"{row['state']}: {row.get('error', '')}"]
    if "probes" in row:  # the doctor's: its probes, and the failures in the node's own Ray session logs
        found = [f"{p['probe']}: {p['summary']}" for p in row["probes"] if p["status"] == "problem"]
        for d in (row.get("logs") or {}).get("diagnoses", []):
            if d["severity"] == "error":
                where = d["evidence"][0] if d["evidence"] else {"file": "?", "lines": [0]}
                found.append(f"logs [{d['id']}] {d['title']} ({where['file']}:L{where['lines'][0]})")
        return found
    return [f"{r['name']}: {r['reason']}" for r in row["results"] if r["required"] and r["status"] == "fail"]


def nodes_pass(data: dict) -> bool:
    """Every node answered and passed, their envs are one, and the all-reduce (when run) gave exact sums."""
    reduce = data.get("allreduce")
    return (bool(data["nodes"]) and not any(node_problems(n) for n in data["nodes"]) and not data["differences"]
            and (reduce is None or reduce["ok"]))


def exit_code(data: dict) -> int:
    trainer = data.get("trainer") or {}
    return 0 if nodes_pass(data) and trainer.get("status") not in TRAINER_FAILED else 1
