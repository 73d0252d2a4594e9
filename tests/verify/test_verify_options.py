"""One VerifyOptions for a verify run: each option written once, read from the command line, written back as a
command line and as JSON (what every cluster node gets); and `verify --ray`'s address and report path checked up
front: a malformed address or an unwritable report is one line and exit 2 before anything starts, a listener that is
not a Ray cluster is named within seconds."""

import http.server
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from verlenv.cli import main, parser
from verlenv.cluster import address, launch
from verlenv.errors import UserError
from verlenv.verify.options import VerifyOptions, option_fields

VERLENV = Path(sys.executable).with_name("verlenv")


def parsed(*argv: str) -> VerifyOptions:
    return VerifyOptions.from_args(parser(["verify", *argv]).parse_args(["verify", *argv]))


def test_each_default_is_written_once_and_the_parser_takes_it_from_there():
    defaults = parsed()
    assert defaults == VerifyOptions()
    assert {name for name, _, _ in option_fields()} == set(VerifyOptions().to_json())
    assert defaults.to_argv() == [] and defaults.mode == "fast"


def test_a_command_line_round_trips_through_the_options():
    argv = ["--gpu", "h100", "--variant", "megatron", "--skip-package", "apex", "--skip-package", "nccl",
            "--timeout", "90", "--thorough", "--rollout-tp", "2", "--actor-tp", "2", "--family", "qwen3",
            "--family", "qwen2.5-vl", "--model-config", "/m/config.json", "--ray", "10.0.0.1:6379",
            "--node-timeout", "600", "--allreduce", "gloo", "--skip-cluster-trainer"]
    options = parsed(*argv)
    assert options.skip_package == ("apex", "nccl") and options.family == ("qwen3", "qwen2.5-vl")
    assert options.timeout == 90.0 and options.rollout_tp == 2 and options.ray == "10.0.0.1:6379"
    assert parsed(*options.to_argv()) == options  # to_argv gives back what the parser reads
    assert VerifyOptions.from_json(options.to_json()) == options
    assert parsed("--ray").ray == "auto" and parsed("--ray").to_argv() == ["--ray"]


def test_a_node_gets_one_machines_options_without_the_clusters_or_the_tool_machines_paths():
    options = parsed("--variant", "megatron", "--thorough", "--family", "qwen3", "--model-config", "/m/c.json",
                     "--ray", "h:1", "--report", "/r.json", "--python", "/p/python", "--node-timeout", "60",
                     "--allreduce", "off", "--skip-cluster-trainer", "--lock", "/l.txt")
    node = options.for_node()
    assert (node.variant, node.thorough, node.family) == ("megatron", True, ("qwen3",))
    assert (node.ray, node.report, node.python, node.lock, node.model_config) == (None, None, None, None, ())
    assert (node.node_timeout, node.allreduce, node.skip_cluster_trainer) == (1800.0, "nccl", False)
    with pytest.raises(UserError, match="unknown option 'colour'"):
        VerifyOptions.from_json({**options.to_json(), "colour": "red"})


@pytest.mark.parametrize("text", ["127.0.0.1", "127.0.0.1:abc", "ray://", "", "  ", "garbage", "http://h:1",
                                  "h:0", "h:70000", "ray://h", ":6379", "h:-1", "a b:1"])
def test_a_malformed_address_is_one_line(text):
    with pytest.raises(UserError) as e:
        address.parse(text)
    assert str(e.value).startswith(f"--ray {text!r}" if not text or text != text.strip() else f"--ray {text}")
    assert "\n" not in str(e.value) and "give auto, HOST:PORT" in str(e.value)


@pytest.mark.parametrize("text, host, port", [("auto", None, None), ("10.0.0.1:6379", "10.0.0.1", 6379),
                                              ("ray://head:10001", "head", 10001), ("[::1]:6379", "::1", 6379)])
def test_a_good_address_is_taken(text, host, port):
    a = address.parse(text)
    assert (a.host, a.port, a.text) == (host, port, text)


@pytest.mark.parametrize("text", ["127.0.0.1", "127.0.0.1:abc", "ray://", "", "garbage"])
def test_the_command_refuses_a_malformed_address_without_a_traceback(text, tmp_path):
    proc = subprocess.run([str(VERLENV), "verify", "--ray", text, "--python", sys.executable, "--no-lock",
                           "--report", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr and "give auto, HOST:PORT" in lines[0], proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_an_unwritable_report_is_refused_before_the_cluster_run(monkeypatch):
    ran = []
    monkeypatch.setattr(launch, "verify_cluster", lambda *a, **k: ran.append(a) or 0)  # never reached
    monkeypatch.setattr(address, "probe", lambda where: ran.append(where))  # never reached either
    code = main(["verify", "--ray", "127.0.0.1:6379", "--python", sys.executable, "--no-lock",
                 "--report", "/dev/null/x.json"])
    assert code == 2 and ran == []


class _HttpServer:
    """A plain HTTP server on a free loopback port: something answers there, but not a Ray cluster."""

    def __enter__(self):
        self.server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self.server.server_address[1]

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_a_listener_that_is_not_ray_is_named_not_waited_on(tmp_path, monkeypatch):
    """The answer is read off the connection (one exchange, CONNECT_S at most): no Ray driver is ever started to
    wait on it, which is what took 730 s before."""
    drivers = []
    monkeypatch.setattr(launch, "run_driver", lambda *a, **k: drivers.append(a))
    with _HttpServer() as port:
        with pytest.raises(UserError) as e:
            address.probe(address.parse(f"127.0.0.1:{port}"))
        assert "is not a Ray cluster" in str(e.value) and "\n" not in str(e.value)
        assert main(["verify", "--ray", f"127.0.0.1:{port}", "--python", sys.executable, "--no-lock",
                     "--report", str(tmp_path / "r.json")]) == 2
        proc = subprocess.run([str(VERLENV), "verify", "--ray", f"127.0.0.1:{port}", "--python", sys.executable,
                               "--no-lock", "--report", str(tmp_path / "r.json")], capture_output=True, text=True,
                              timeout=120)
    assert drivers == [] and address.CONNECT_S <= 5
    assert proc.returncode == 2 and "is not a Ray cluster" in proc.stderr and "Traceback" not in proc.stderr


def test_an_address_where_nothing_listens_is_named():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but never listening: connections are refused
        with pytest.raises(UserError, match=rf"nothing answers at 127.0.0.1:{port} \(Connection refused\)"):
            address.probe(address.parse(f"127.0.0.1:{port}"))


def _refused(capsys, *argv: str) -> str:
    """The one stderr line of a verify command refused before anything runs (exit 2, no report written)."""
    code = main(["verify", "--python", sys.executable, "--no-lock", *argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("names", [("all", "nope"), ("nope", "all"), ("qwen3", "nope")])
def test_an_unknown_family_beside_all_is_refused_not_dropped(capsys, tmp_path, names):
    argv = [a for name in names for a in ("--family", name)]
    line = _refused(capsys, *argv, "--report", str(tmp_path / "r.json"))
    assert line.startswith("verlenv verify: --family nope: unknown family; valid: ") and "qwen3" in line
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("option", ["--timeout", "--node-timeout"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-5"])
def test_a_time_limit_that_is_not_a_positive_finite_number_is_refused(capsys, tmp_path, option, value):
    """nan compared false with every bound, so `<= 0` let it through and the limit was off."""
    line = _refused(capsys, f"{option}={value}", "--report", str(tmp_path / "r.json"))
    assert line.startswith(f"verlenv verify: {option} ") and "positive, finite number of seconds" in line
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("option", ["--rollout-tp", "--actor-tp"])
@pytest.mark.parametrize("value", ["nan", "inf", "0", "-2", "1.5"])
def test_a_parallel_size_that_is_not_a_positive_whole_number_is_refused(capsys, option, value):
    with pytest.raises(SystemExit) as e:
        parser(["verify", option, value]).parse_args(["verify", option, value])
    assert e.value.code == 2 and "is not a positive whole number" in capsys.readouterr().err
