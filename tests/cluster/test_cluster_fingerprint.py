"""The node fingerprint's torch facts come from a child process: what it reports when that child succeeds, fails or
outlives a limit it was given. A stand-in program file replaces the torch import (the tool's own interpreter has no
torch); the outcome never depends on how fast this machine is."""

import inspect

from verlenv.cluster import fingerprint


def _stand_in(monkeypatch, folder, text):
    program = folder / "torch_versions.py"
    program.write_text(text + "\n")
    monkeypatch.setattr(fingerprint, "TORCH_SCRIPT", program)


def test_the_childs_own_report_becomes_torch_facts(monkeypatch, tmp_path):
    _stand_in(monkeypatch, tmp_path, "import json; print(json.dumps({'version': '2.11.0', 'cuda': None}))")
    assert fingerprint.torch_facts() == {"torch:version": "2.11.0", "torch:cuda": None}


def test_a_child_that_fails_is_reported_as_failing(monkeypatch, tmp_path):
    _stand_in(monkeypatch, tmp_path, "raise ImportError('libtorch_cuda.so: cannot open shared object')")
    assert fingerprint.torch_facts() == {"torch:import": "fails"}


def test_no_clock_of_its_own_by_default_and_a_given_limit_is_named(monkeypatch, tmp_path):
    # A child that never answers (it waits on a pipe no one writes): only a limit given by the caller ends it.
    _stand_in(monkeypatch, tmp_path, "import os; r, w = os.pipe(); os.read(r, 1)")
    assert fingerprint.torch_facts(timeout=1) == {"torch:import": "timed out after 1 s"}
    assert inspect.signature(fingerprint.torch_facts).parameters["timeout"].default is None

