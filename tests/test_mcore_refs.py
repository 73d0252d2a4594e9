"""verl's Megatron actor and its bridge use only what the locked megatron-core defines
(src/verlenv/verify/mcore_refs.py).

The locked wheels are read from PyPI (hash-checked against the lock); a source-built bridge (Megatron-Bridge) from its
recipe's verified git tree where a clone is given ($VERLENV_MEGATRON_BRIDGE_GIT), else from the installed env
(tests/test_megatron_bridge.py). What each leaves undefined is compared with the catalog's reviewed list (stacks.toml
megatron_api_gaps), one reason each: optional paths a default verl run never imports. `verlenv verify` runs the same
check on an installed env (megatron-core/api-refs). A relock that breaks the default path (as megatron-core 0.18.2 did
under mbridge 0.15.1, found on an H100 in verl's own trainer) fails here, on a CPU.
"""

import hashlib
import io
import json
import os
import urllib.request
import zipfile
from pathlib import Path

import pytest

from test_verl_requirements import CATALOG, ROOT, cache_dir
from verlenv.catalog import pins, stacks
from verlenv.fsutil import write_atomic
from verlenv.native import recipes, sources
from verlenv.verify import mcore_refs as refs, static

PROGRAMS = Path(__file__).parent / "data" / "programs"


def locked_sources(lock_text: str, name: str, prefix: str) -> dict[str, str]:
    """The .py files under `prefix` of a wheel of the package the lock installs, read from PyPI (hash-checked)."""
    pin = pins.parse_lock(lock_text)[name]
    request = urllib.request.Request(f"https://pypi.org/simple/{name}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as r:
        files = json.load(r)["files"]
    locked = [f for f in files if f["filename"].endswith(".whl") and f"-{pin.version}-" in f["filename"]
              and f"sha256:{f['hashes']['sha256']}" in pin.hashes]
    # The .py files are the same in every wheel of a release; the env's own (cp312, x86_64) first when there is one.
    wanted = sorted(locked, key=lambda f: not ("cp312" in f["filename"] or "py3-none-any" in f["filename"]))
    assert wanted, f"no locked wheel of {name}=={pin.version} on PyPI"
    f = wanted[0]
    cached = cache_dir() / f"{f['filename']}.{f['hashes']['sha256']}"
    if not cached.is_file():
        with urllib.request.urlopen(f["url"], timeout=300) as r:
            data = r.read()
        assert hashlib.sha256(data).hexdigest() == f["hashes"]["sha256"], f"{f['filename']}: sha256 differs from PyPI's"
        write_atomic(cached, data)
    with zipfile.ZipFile(io.BytesIO(cached.read_bytes())) as z:
        return {n: z.read(n).decode("utf-8", "replace") for n in z.namelist()
                if n.startswith(prefix) and n.endswith(".py")}


MEGATRON = [v for v in CATALOG.all_variants() if v.name == "megatron"]


def built_sources(variant: stacks.Variant, dist: str, folder: str, work) -> dict[str, str] | None:
    """The .py files under `folder` of a git source build, from its recipe's verified tree; None without a clone."""
    clone = os.environ.get(f"VERLENV_{dist.upper().replace('-', '_')}_GIT")
    if not clone:
        return None
    tree = sources.export_git_tree(recipes.load(ROOT, dist), Path(clone), work)
    base = next(p for p in tree.rglob("*") if p.is_dir() and p.as_posix().endswith("/" + folder))
    return {f"{folder}/{p.relative_to(base).as_posix()}": p.read_text() for p in base.rglob("*.py")}


@pytest.mark.parametrize("variant", MEGATRON, ids=lambda v: v.key)
def test_verl_and_its_bridge_use_only_what_the_locked_megatron_core_defines(variant: stacks.Variant, tmp_path):
    lock = pins.lock_path(ROOT, variant, "linux-64").read_text()
    locked = pins.parse_lock(lock)
    index = refs.Index(locked_sources(lock, "megatron-core", "megatron/core/"))
    found, unread = set(), []
    for dist, folder in static.MEGATRON_USERS:
        if dist in locked:
            users = locked_sources(lock, dist, folder + "/")
        elif variant.source_build(dist):
            users = built_sources(variant, dist, folder, tmp_path / dist)
            if users is None:
                unread.append(folder)  # checked in the installed env instead (tests/test_megatron_bridge.py)
                continue
        else:
            continue
        found |= {m.key for m in refs.check_package(users, index)}
    # The catalog's reviewed gaps (stacks.toml megatron_api_gaps), exactly: a new gap fails, and so does a stale entry.
    reviewed = {k for k in variant.megatron_api_gaps if not any(k.startswith(folder + "/") for folder in unread)}
    assert found == reviewed
    # Each reviewed gap is in code the variant installs.
    installed = [folder for dist, folder in static.MEGATRON_USERS if dist in locked or variant.source_build(dist)]
    assert all(any(k.startswith(folder + "/") for folder in installed) for k in variant.megatron_api_gaps)


MCORE = {
    "megatron/core/__init__.py": "from .enums import ModelType\nfrom . import parallel_state\n",
    "megatron/core/enums.py": "import enum\nclass ModelType(enum.Enum):\n    encoder_or_decoder = 1\n",
    "megatron/core/parallel_state.py": "def get_rank():\n    return 0\n",
    "megatron/core/models/gpt/gpt_model.py": "from megatron.core.enums import ModelType\nclass GPTModel:\n    pass\n",
}


def test_a_member_an_enum_no_longer_has_is_found_through_a_reexport():
    user = ("from megatron.core.models.gpt.gpt_model import ModelType\n"
            "def build(t):\n    return t == ModelType.encoder_and_decoder or t == ModelType.encoder_or_decoder\n")
    (missing,) = refs.check_source("mbridge/core/util.py", user, refs.Index(MCORE))
    assert (missing.line, missing.ref) == (3, "megatron.core.models.gpt.gpt_model.ModelType.encoder_and_decoder")
    # Defined in the enum's body (megatron-core 0.16 kept it as a deprecated property): nothing is missing.
    kept = dict(MCORE, **{"megatron/core/enums.py": MCORE["megatron/core/enums.py"]
                          + "    @property\n    def encoder_and_decoder(self):\n        raise ValueError\n"})
    assert refs.check_source("mbridge/core/util.py", user, refs.Index(kept)) == []


def test_missing_modules_and_names_are_found_and_guarded_imports_are_not():
    index = refs.Index(MCORE)
    user = ("from megatron.core import parallel_state, ModelType\n"
            "from megatron.core.parallel_state import get_rank, get_world\n"
            "from megatron.core.distributed.custom_fsdp import FSDP\n"
            "try:\n    from megatron.core.fusions import fused\nexcept ImportError:\n    fused = None\n")
    found = [(m.line, m.ref, m.why) for m in refs.check_source("verl/x.py", user, index)]
    assert found == [(2, "megatron.core.parallel_state.get_world", "not defined there"),
                     (3, "megatron.core.distributed.custom_fsdp", "no such module")]


def test_verify_reads_an_installed_env_and_fails_only_on_unreviewed_gaps(tmp_path):
    from verlenv.doctor.facts import Dist, EnvFacts
    from verlenv.verify import static
    from verlenv.verify.runner import Scope

    site = tmp_path / "site-packages"
    for path, text in {**MCORE, "mbridge/core/util.py": "from megatron.core.models.gpt.gpt_model import ModelType\n"
                       "x = ModelType.encoder_and_decoder\n",
                       "verl/a.py": "from megatron.core import parallel_state\n"}.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    dists = [Dist(n, v, [], str(site))
             for n, v in (("megatron-core", "0.18.2"), ("mbridge", "0.15.1"), ("verl", "0.9.1"))]
    facts = EnvFacts("python", "/p", "/p", "3.12.3", [str(site)], None, dists, {})
    scope = Scope(frozenset({"megatron-core"}), frozenset(), None)
    r = static.check_megatron_api(facts, {}, scope)
    assert (r.status, r.required) == ("fail", True)
    assert "mbridge/core/util.py:2: megatron.core.models.gpt.gpt_model.ModelType.encoder_and_decoder" in r.reason
    reviewed = {"mbridge/core/util.py: megatron.core.models.gpt.gpt_model.ModelType.encoder_and_decoder": "why"}
    r = static.check_megatron_api(facts, reviewed, scope)
    assert r.status == "pass" and r.numbers["reviewed_gaps"] == list(reviewed), r.reason
    assert static.check_megatron_api(EnvFacts("python", "/p", "/p", "3.12.3", [], None, dists[1:], {}), {},
                                     scope) is None
