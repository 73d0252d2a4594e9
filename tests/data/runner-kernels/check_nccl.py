"""Stand-in: a script that writes one result, then exits 3."""
import _common

_common.write([{"check": "nccl/all-reduce/1gpu", "package": "nccl", "status": "pass"}])
raise SystemExit(3)
