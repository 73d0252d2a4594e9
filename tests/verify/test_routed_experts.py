"""The trainer check's MoE models, their routed experts calibrated to the table's share of the logits
(kernels/_routed_experts.py, families.toml routed_influence): built inside the default env with its transformers,
every MoE family reaches the share by one factor on its routed experts' down projections alone; a dense family is
left as drawn; experts that never move the logits are one line."""

import json
import subprocess
import tomllib
from pathlib import Path

import pytest

from test_kernel_scripts import KERNELS, REPO, has_modules, torch_python
from verlenv.catalog import families
from verlenv.errors import UserError

PROGRAM = REPO / "tests" / "data" / "trainer" / "routed_experts_in_env.py"
# Families with routed experts, and ones without (gpt-oss: biased experts; deepseek-v3 and glm4-moe: a dense first
# layer and shared experts beside the routed ones).
MOE = ["qwen3-moe", "qwen3.5-moe", "qwen3-next", "gpt-oss", "deepseek-v3", "glm4-moe"]
DENSE = ["qwen3", "qwen3.5"]
# A share no family's experts have as drawn (0.10-1.19), so reaching it takes scaling.
OTHER = 0.6


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    python = torch_python()
    if python is None or not has_modules(python, "transformers"):
        pytest.skip("no env python with torch and transformers")
    table = families.table()
    rows = table.rows([table.families[n] for n in MOE + DENSE])
    directory = tmp_path_factory.mktemp("routed")
    (directory / "rows.json").write_text(json.dumps(rows))
    proc = subprocess.run([python, str(PROGRAM), str(KERNELS), str(directory / "rows.json"),
                           str(OTHER), str(directory / "out.json")], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return table.defaults["routed_influence"], json.loads((directory / "out.json").read_text())


def routed(name: str) -> bool:
    """A parameter of a routed expert's down projection (transformers 5's packed experts)."""
    return name.rsplit(".", 1)[-1] in ("down_proj", "down_proj_bias") and ".experts." in f"{name}."


@pytest.mark.slow
@pytest.mark.parametrize("name", MOE)
def test_an_moe_family_reaches_the_share_by_scaling_its_routed_experts_alone(built, name):
    target, out = built
    r = out[name]
    assert r["share"] == pytest.approx(target, rel=0.05), r
    assert r["other_share"] == pytest.approx(OTHER, rel=0.05), r
    assert r["drawn_share"] != pytest.approx(OTHER, rel=0.05)  # reaching OTHER took scaling
    experts = {n: f for n, f in r["factors"].items() if routed(n)}
    rest = {n: f for n, f in r["factors"].items() if not routed(n)}
    assert experts, r["factors"]
    low, high = min(f[0] for f in experts.values()), max(f[1] for f in experts.values())
    assert high == pytest.approx(low, rel=1e-4) and low != pytest.approx(1.0)  # one factor, every layer
    # Besides the experts only the final norm changed: the logit scale is measured after the calibration.
    assert all(n.endswith("norm.weight") and ".layers." not in n for n in rest), sorted(rest)
    # Mixing the experts up changes exactly the routed down projections, and mixing them back restores all.
    assert set(r["round_trip"]["changed"]) == set(experts) and r["round_trip"]["restored"]


@pytest.mark.slow
@pytest.mark.parametrize("name", DENSE)
def test_a_family_without_routed_experts_is_built_as_drawn(built, name):
    r = built[1][name]
    assert r["share"] is None and r["factors"] == {} and r["round_trip"] == {"changed": [], "restored": True}


@pytest.mark.slow
def test_experts_that_never_move_the_logits_are_one_line(built):
    line = built[1]["qwen3-moe"]["zeroed"]
    assert "do not move the logits" in line and "\n" not in line


@pytest.mark.slow
def test_transformers_4s_module_list_of_experts_is_found_and_mixed_up(built):
    # A stand-in module tree (verl-0.7's transformers 4.57 keeps experts so); 3 experts, each w2 with a bias.
    assert built[1]["module_list"] == {"layers": 1, "tensors_per_expert": [2, 2, 2], "moved_by_one": True}


@pytest.mark.parametrize("value", [0, -0.4, "0.4", True])
def test_the_table_refuses_a_share_that_is_no_positive_number(value):
    data = tomllib.loads((REPO / "src" / "verlenv" / "data" / "families.toml").read_text())
    data["defaults"]["routed_influence"] = value
    with pytest.raises(UserError, match="defaults.routed_influence must be a positive number"):
        families.parse(Path("families.toml"), data)
