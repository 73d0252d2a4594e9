"""benchmarks/model_config_sweep.py: a folder of published config.json files through --model-config's shrink, the env
probe and one CPU training step in the env. A good config trains, a broken one is its one-line refusal (the shrink's, or
the probe's for that config alone) and the sweep exits 1; a folder without configs, or no env, is one line and
exit 2."""

import importlib.util
import json
import sys

from test_verify_profiles import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import model_config_sweep as sweep  # noqa: E402

_spec = importlib.util.spec_from_file_location("published", REPO / "tests" / "data" / "model-configs" / "published.py")
published = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(published)


def put(folder, name: str, config: dict) -> None:
    (folder / name).mkdir(parents=True)
    (folder / name / "config.json").write_text(json.dumps(config))


def test_a_good_config_trains_and_a_broken_one_is_its_refusal(env_python, tmp_path, capsys):
    put(tmp_path / "configs", "coder", published.as_published("Qwen3-Coder-480B-A35B-Instruct"))
    put(tmp_path / "configs", "broken", {**published.as_published("GLM-4.5"), "head_dim": 0})
    # shrinks, but names a class the env's transformers lacks: the probe refuses it, and only it
    put(tmp_path / "configs", "no-class", {**published.as_published("Qwen3-Next-80B-A3B-Instruct"),
                                           "architectures": ["Qwen3NextForCausalLMX"]})
    out = tmp_path / "sweep.json"
    assert sweep.main([str(tmp_path / "configs"), "--python", env_python, "--out", str(out)]) == 1
    results = json.loads(out.read_text())["results"]
    coder, broken = results["coder"], results["broken"]
    assert coder["verdict"] == "trained" and coder["model_class"] == "Qwen3MoeForCausalLM"
    assert 1_000_000 < coder["params"] < 20_000_000 and coder["loss"] > 0 and coder["no_grad"] == []
    assert broken["verdict"] == "refused" and broken["line"].endswith("head_dim is 0; a size is a whole number above 0")
    assert results["no-class"]["verdict"] == "refused by the probe"
    assert "Qwen3NextForCausalLMX, which transformers" in results["no-class"]["line"]
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 3 and any(line.startswith("broken") and "refused" in line for line in printed)


def test_no_configs_or_no_env_is_one_line_and_exit_2(tmp_path, capsys):
    assert sweep.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().endswith("no <name>/config.json below it; give the folder that holds one "
                                                    "per model")
    put(tmp_path, "coder", published.as_published("Qwen3-Coder-480B-A35B-Instruct"))
    assert sweep.main([str(tmp_path), "--python", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no such interpreter" in err
