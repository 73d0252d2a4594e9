"""scripts/flashinfer_aot.py lays its modules out where the env's FlashInfer looks for prebuilt ones. Here (the
compile takes 54 min on this machine's 2 cores; a GPU run of its result is benchmarks/flashinfer_gdn_aot.py): the
package it writes, with a stand-in file where a compiled module would be, is the AOT folder the env's real FlashInfer
reads, its version passes FlashInfer's check, and the GDN prefill spec counts as prebuilt; bad --jobs is one line."""

import json
import subprocess
import sys

from test_verify_profiles import REPO

SCRIPT = REPO / "scripts" / "flashinfer_aot.py"

PROBE = f"""
import json, os, sys
sys.path.insert(0, {str(SCRIPT.parent)!r})
import flashinfer_aot
into = sys.argv[1]
os.environ["FLASHINFER_WORKSPACE_BASE"] = os.path.join(into, ".work")
os.environ["FLASHINFER_CUDA_ARCH_LIST"] = "9.0a"  # no GPU here to read it from
from importlib.metadata import version
from pathlib import Path
package = os.path.join(into, "flashinfer_jit_cache")
flashinfer_aot.write_package(Path(package), version("flashinfer-python"), [], {{}})
so = os.path.join(package, "jit_cache", "gdn_prefill_sm90", "gdn_prefill_sm90.so")
if len(sys.argv) > 2:
    os.makedirs(os.path.dirname(so)); open(so, "w").write("test double: a compiled module's place")
sys.path.insert(0, into)
from flashinfer.jit import env
from flashinfer.jit.gdn import gen_gdn_prefill_sm90_module
spec = gen_gdn_prefill_sm90_module()
print(json.dumps({{"aot_dir": str(env.FLASHINFER_AOT_DIR), "prebuilt": spec.is_aot, "aot_path": str(spec.aot_path)}}))
"""


def probe(env_python, folder, placed: bool) -> dict:
    args = [env_python, "-c", PROBE, str(folder)] + (["placed"] if placed else [])
    out = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_flashinfer_reads_the_package_as_its_aot_folder(env_python, tmp_path):
    got = probe(env_python, tmp_path, placed=True)
    jit_cache = tmp_path / "flashinfer_jit_cache" / "jit_cache"
    assert got == {"aot_dir": str(jit_cache), "prebuilt": True,
                   "aot_path": str(jit_cache / "gdn_prefill_sm90" / "gdn_prefill_sm90.so")}


def test_without_the_module_flashinfer_would_compile_it(env_python, tmp_path):
    assert probe(env_python, tmp_path, placed=False)["prebuilt"] is False


def test_bad_jobs_is_one_line(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), "--into", str(tmp_path), "--jobs", "0"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--jobs 0: give a whole number" in out.stderr
