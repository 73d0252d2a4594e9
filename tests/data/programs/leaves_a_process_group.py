"""A stand-in for a trainer whose driver exits leaving a process behind (test double): like Ray's services, the
child puts itself in a process group of its own (so killpg of the driver's group misses it) and lives on. The
child's pid is the one line printed; the child sleeps until killed."""
import os
import sys
import time

child = os.fork()
if child == 0:
    os.setpgrp()
    sys.stdout.close()
    while True:
        time.sleep(3600)
print(child, flush=True)
