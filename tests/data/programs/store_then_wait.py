"""wheelcache.store of a wheel, made to stop right after its copy (test double of a slow copy): it prints "copied" and
waits there, so a kill lands inside store whatever the machine's speed. argv: wheelhouse, package, fp, wheel."""
import shutil
import sys
import threading
from pathlib import Path

from verlenv.native import wheelcache

copy = shutil.copy2


def copy_then_wait(src, dst, **kwargs):
    copy(src, dst, **kwargs)
    print("copied", flush=True)
    threading.Event().wait()


shutil.copy2 = copy_then_wait
wheelhouse, package, fp, wheel = sys.argv[1:5]
wheelcache.store(Path(wheelhouse), package, fp, Path(wheel), {})
