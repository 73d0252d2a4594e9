"""Test double of the kernel folder's helper: what the stand-in scripts share (never a check itself)."""
import argparse
import json


def result(check, status, **kw):
    return {"check": check, "package": "torch", "status": status, **kw}


def arguments():
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--profile")
    return p.parse_args()


def write(results):
    with open(arguments().out, "w") as f:
        json.dump(results, f)
