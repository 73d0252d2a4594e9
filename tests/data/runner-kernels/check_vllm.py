"""Stand-in: a script that hangs with a worker process of its own (as vLLM's engine core would)."""
import os
import subprocess
import sys
import threading

child = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"])
with open(os.environ["CHILD_PID_FILE"], "w") as f:
    f.write(str(child.pid))
print("vllm check started", flush=True)
threading.Event().wait()  # forever: only the runner's timeout ends it
