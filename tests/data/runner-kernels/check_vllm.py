"""Stand-in: a script that hangs with a worker process of its own (as vLLM's engine core would). It says it started,
then writes its worker's pid to $CHILD_PID_FILE (the test's sign that the line was printed)."""
import os
import subprocess
import sys
import threading

child = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"])
print("vllm check started", flush=True)
with open(os.environ["CHILD_PID_FILE"] + ".tmp", "w") as f:
    f.write(str(child.pid))
os.rename(os.environ["CHILD_PID_FILE"] + ".tmp", os.environ["CHILD_PID_FILE"])
threading.Event().wait()  # forever: only the runner's timeout ends it
