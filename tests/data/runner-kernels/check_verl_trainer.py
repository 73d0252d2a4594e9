"""Stand-in: a check that fails after its child process printed why; the report keeps that check's own output."""
import subprocess
import sys

import _common

print("PASS verl/trainer/setup", flush=True)
subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('EngineCore died: out of memory\\n')"])
print("FAIL verl/trainer/steps (Engine core initialization failed)", flush=True)
_common.write([{"check": "verl/trainer/setup", "package": "verl", "status": "pass"},
               {"check": "verl/trainer/steps", "package": "verl", "status": "fail",
                "reason": "Engine core initialization failed"}])
