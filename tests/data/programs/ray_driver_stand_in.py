"""A stand-in for the env's interpreter running `-m verlenv.cluster.driver REQUEST OUT`: it joins no cluster, says
it has joined (the request's `connected` file), tells the test its pid (HANDSHAKE, written whole by a rename), then
waits on its stdin until the test closes it."""

import json
import os
import sys
from pathlib import Path

request = json.loads(Path(sys.argv[3]).read_text())
Path(request["connected"]).touch()
handshake = Path(os.environ["HANDSHAKE"])
handshake.with_suffix(".tmp").write_text(str(os.getpid()))
handshake.with_suffix(".tmp").rename(handshake)
sys.stdin.read()
