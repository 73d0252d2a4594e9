"""Stand-in: an optional package's failing check, which also notes that it ran."""
import os

import _common

with open(os.environ["APEX_RAN"], "w") as f:
    f.write("ran")
_common.write([{"check": "apex/fused-layer-norm", "package": "apex", "status": "fail", "reason": "err 0.5"}])
