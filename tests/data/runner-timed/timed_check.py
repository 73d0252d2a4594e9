"""Test double of a kernel check script, copied in as check_<name>.py: notes its start and its end in $TIMELINE
(one JSON line each, appended in the order they happen, with the --profile it got) and writes one passing result.

Two settings order the events without timing them: $AFTER ({"torch": ["verl_trainer"]}) keeps a script from
starting until the scripts it names have started, $HOLD ({"verl_trainer": "verl"}) keeps one from ending until the
script it names has ended. A script the runner starts beside the others is then running while they run, however
fast the machine is; a runner that does not run them so leaves a script waiting until its --timeout."""
import argparse
import json
import os
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--out")
p.add_argument("--profile")
args = p.parse_args()
name = os.path.basename(sys.argv[0])[len("check_"):-len(".py")]
TIMELINE = os.environ["TIMELINE"]


def note(event):
    line = json.dumps({"script": name, "event": event, "profile": json.loads(args.profile)}) + "\n"
    fd = os.open(TIMELINE, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())  # one write of an O_APPEND file: lines of concurrent scripts never mix
    finally:
        os.close(fd)


def seen(script, event):
    if not os.path.exists(TIMELINE):
        return False
    with open(TIMELINE) as f:
        return any(e["script"] == script and e["event"] == event for e in map(json.loads, f))


def wait(script, event):
    while not seen(script, event):
        time.sleep(0.01)  # polls for the event: how soon it comes changes nothing but the wait


for first in json.loads(os.environ.get("AFTER") or "{}").get(name, []):
    wait(first, "start")
note("start")
if held_until := json.loads(os.environ.get("HOLD") or "{}").get(name):
    wait(held_until, "end")
note("end")
with open(args.out, "w") as f:
    json.dump([{"check": name + "/ran", "package": {"verl_trainer": "verl", "flash_attn": "flash-attn"}.get(name, name),
                "status": "pass"}], f)
