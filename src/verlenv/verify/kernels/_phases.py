"""Where verl's trainer spends its time: phases read from the marker lines of its own output.

The trainer check reads verl's output line by line and notes when each line arrived (seconds since launch). A
line that carries its own timestamp (Ray's, verl's, vLLM's and FlashInfer's loggers do) is placed by that
timestamp, a plain print by its arrival. Marker lines (below, each with the library line that prints it) end
the phases of verl 0.9.1's start-up in the order its V1 trainer runs them; a phase whose marker, or whose
predecessor's marker, is missing is absent, never guessed. The rollout engine's own reports (its row's `reports`:
vLLM's model load, torch.compile, CUDA graph capture, engine init) and FlashInfer's autotune lines split the rollout
server's start; verl's own `timing_s/*` metrics split each step.

Standard library only: it runs in the env under test, beside _common.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Ray's prefix on a line a worker printed, "(TaskRunnerV1 pid=9251)" or "(WorkerDict pid=10132, ip=10.0.0.2)";
# a process started by an actor may add its own ("(vLLMHttpServer pid=1) (EngineCore pid=2) ...").
RAY_PREFIX = re.compile(r"^\((?P<actor>[^\s()]+) pid=\d+(?:, ip=[^)]*)?\)\s?")
# Timestamps the libraries write at the start of a line, all in the logging node's local time:
#   Ray (ray_constants.LOGGER_FORMAT)  "2026-11-25 13:10:39,511\tINFO worker.py:2003 -- ..."
#   FlashInfer (jit/core.py)            "2026-11-25 13:12:55,123 - INFO - autotuner.py:622 - flashinfer.jit: ..."
#   verl (utils/logging_utils.py)       "INFO:2026-11-25 13:11:43,566:train and validate dataloader initialized..."
#   vLLM (vllm/logger.py, no year)      "INFO 11-25 13:12:55 [gpu_model_runner.py:5256] Model loading took ..."
FULL_STAMP = re.compile(r"^(?:[A-Z]+:)?(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)[,.](\d{3})\b")
VLLM_STAMP = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) \[")
# A stamped line is trusted within this much of its arrival (vLLM's stamps are whole seconds; Ray forwards a
# worker's lines with some delay): beyond it the clocks disagree (another node), and arrival is used.
CLOCK_SLACK_S = 5.0


@dataclass(frozen=True)
class Marker:
    milestone: str
    pattern: re.Pattern
    source: str  # the library line that prints it


# Milestones of verl 0.9.1's V1 trainer start-up, in the order it reaches them (verl/trainer/main_ppo.py run_ppo
# and TaskRunnerV1.run, verl/trainer/ppo/v1/trainer_base.py _setup). The first matching line is the milestone.
MARKERS = (
    Marker("ray_init", re.compile(r"^ray init kwargs: "),
           "verl/trainer/main_ppo.py run_ppo: print(f'ray init kwargs: ...') just before ray.init()"),
    Marker("ray_up", re.compile(r" -- (Started a local Ray instance|Connected to Ray cluster)\b"),
           "ray/_private/worker.py: 'Started a local Ray instance.' / 'Connected to Ray cluster.'"),
    Marker("dataloader", re.compile(r"train and validate dataloader initialized"),
           "verl/trainer/ppo/v1/trainer_base.py: logger.info('train and validate dataloader initialized, ...')"),
    Marker("workers_spawned", re.compile(r"create worker group "),
           "verl/trainer/ppo/v1/trainer_base.py _setup: logger.info(f'create worker group {spawn_wg.keys()}')"),
    Marker("workers_ready", re.compile(r"actor and ref model engine initialized"),
           "verl/trainer/ppo/v1/trainer_base.py _setup: logger.info('actor and ref model engine initialized')"),
    Marker("reward_ready", re.compile(r"reward loop manager initialized"),
           "verl/trainer/ppo/v1/trainer_base.py _setup: logger.info('reward loop manager initialized')"),
    Marker("rollout_ready", re.compile(r"^LLMServerManager: "),
           "verl/workers/rollout/llm_server.py: print(f'LLMServerManager: {self.server_addresses}')"),
    Marker("fit_ready", re.compile(r"all initialize finished, ready to fit"),
           "verl/trainer/ppo/v1/trainer_base.py _setup: logger.info('all initialize finished, ready to fit')"),
)
# The TaskRunner actor's first line (its config print): the actor's process is up and has imported verl.
TASK_RUNNER = re.compile(r"^TaskRunner(V1)?$")
# The rollout engine's own lines (its row in data/backends.toml, handed over whole): the line its server prints once
# its actor is up (`server_args`), and the durations it reports itself (`reports`: name, a regex whose first group is
# the seconds, the library line). Several replicas start at once: the longest counts.
# FlashInfer's autotuner brackets its run (flashinfer/autotuner.py autotune()); vLLM runs it at engine warm-up.
AUTOTUNE_START = re.compile(r"\[Autotuner\]: Autotuning process starts")
AUTOTUNE_END = re.compile(r"\[Autotuner\]: Autotuning process ends")

# The top-level phases: each ends at its milestone and starts at the previous one ("launch" is 0).
CHAIN = (
    ("ray_init", "driver_start"),       # python, verl's imports, Hydra's config, validate_config; on one node, first
                                        # the Ray verify starts for the driver (_verl_own_ray.py: its line's seconds)
    ("ray_up", "ray_up"),               # ray.init: a local Ray instance started (or one joined: verify's, a cluster)
    ("task_runner", "task_runner"),     # the TaskRunner actor's process up, verl imported there
    ("dataloader", "trainer_setup"),    # the trainer object: tokenizer, datasets, dataloaders
    ("workers_spawned", "workers_spawn"),  # the GPU worker processes (Ray actors) created
    ("workers_ready", "workers_init"),  # the FSDP/Megatron actor built on every GPU
    ("reward_ready", "reward_workers"),
    ("rollout_ready", "rollout_server"),  # vLLM servers up (split below by vLLM's own reports)
    ("fit_ready", "weight_sync"),       # checkpoint engine, replicas put to sleep, checkpoint loaded
    ("step1_start", "agent_loop"),      # agent loop manager and tracking; its workers start inside step 1
    ("step1_end", "step1"),
    ("step2_start", "between_steps"),
    ("step2_end", "step2"),
    ("exit", "teardown"),               # from the last step's metrics line to the process's exit
)
# verl's own step timers (verl/trainer/ppo/v1/trainer_base.py marked_timer), in the order a step runs them.
STEP_TIMERS = ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor",
               "update_weights", "save_checkpoint", "testing")
STEP_LINE = re.compile(r"\bstep:(\d+) - ")


@dataclass(frozen=True)
class Line:
    arrival: float | None  # seconds since launch when the line arrived; None where unknown
    text: str


def strip(text: str) -> tuple[str, str | None]:
    """A line without colour codes and Ray's prefixes: (text, the outermost Ray actor's name or None)."""
    text = ANSI.sub("", text)
    actor = None
    while (match := RAY_PREFIX.match(text)) is not None:
        actor = actor or match.group("actor")
        text = text[match.end():]
    return text, actor


def stamp(text: str, launch_wall: float) -> float | None:
    """The line's own timestamp, in seconds since launch (launch_wall is the launch's time.time())."""
    match = FULL_STAMP.match(text)
    if match:
        year, month, day, hour, minute, second, millis = map(int, match.groups())
        return _local(year, month, day, hour, minute, second) + millis / 1000 - launch_wall
    match = VLLM_STAMP.match(text)
    if match:
        month, day, hour, minute, second = map(int, match.groups())
        year = time.localtime(launch_wall).tm_year
        wall = _local(year, month, day, hour, minute, second)
        if wall - launch_wall > 180 * 86400:  # a December stamp read in January's year
            wall = _local(year - 1, month, day, hour, minute, second)
        elif launch_wall - wall > 180 * 86400:  # a run across New Year
            wall = _local(year + 1, month, day, hour, minute, second)
        return wall - launch_wall
    return None


def _local(year, month, day, hour, minute, second) -> float:
    return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))


def when(line: Line, text: str, launch_wall: float | None) -> float | None:
    """Seconds since launch at which a line was written: its own stamp where it has one that its arrival does
    not contradict, else its arrival."""
    stamped = stamp(text, launch_wall) if launch_wall is not None else None
    if stamped is None:
        return line.arrival
    if line.arrival is not None and not -CLOCK_SLACK_S <= stamped <= line.arrival + CLOCK_SLACK_S:
        return line.arrival
    return stamped


def rollout_markers(rollout: dict | None) -> tuple[re.Pattern | None, list[tuple[str, re.Pattern]]]:
    """A rollout row's server line and reports, compiled."""
    if not rollout:
        return None, []
    server = re.compile(rollout["server_args"]) if rollout.get("server_args") else None
    return server, [(r["name"], re.compile(r["pattern"])) for r in rollout.get("reports", [])]


def milestones(lines: list[Line], launch_wall: float | None, rollout: dict | None = None
               ) -> tuple[dict[str, float], dict[str, float]]:
    """(milestone -> seconds since launch, rollout sub-phase -> seconds) from the trainer's output; rollout: the
    rollout's row (its server line and reports), None for none."""
    server_args, reports = rollout_markers(rollout)
    found: dict[str, float] = {"launch": 0.0}
    reported: dict[str, float] = {}
    autotune_start = autotune_end = None
    seen: set[str] = set()

    def first(name: str, at: float | None) -> None:
        """Only a milestone's first line counts: when it cannot be placed, the milestone stays unknown."""
        if name not in seen:
            seen.add(name)
            if at is not None:
                found[name] = at

    for line in lines:
        text, actor = strip(line.text)
        at = when(line, text, launch_wall)
        for marker in MARKERS:
            if marker.pattern.search(text):
                first(marker.milestone, at)
        if actor and TASK_RUNNER.match(actor):
            first("task_runner", at)
        if server_args is not None and server_args.search(text):
            first("serve_args", at)
        if at is not None:
            if AUTOTUNE_START.search(text):
                autotune_start = at if autotune_start is None else min(autotune_start, at)
            if AUTOTUNE_END.search(text):
                autotune_end = at if autotune_end is None else max(autotune_end, at)
        for name, pattern in reports:
            match = pattern.search(text)
            if match:
                reported[name] = max(reported.get(name, 0.0), float(match.group(1)))
        match = STEP_LINE.search(text)
        if match:
            first(f"step{match.group(1)}_end", at)
    if autotune_start is not None and autotune_end is not None and autotune_end >= autotune_start:
        reported["autotune"] = autotune_end - autotune_start
    return found, reported


def phases(lines: list[Line], launch_wall: float | None, exit_s: float | None,
           steps: dict[int, dict[str, float]], wall_s: float | None = None, rollout: dict | None = None
           ) -> dict[str, float]:
    """`phase/<name>_s` numbers, in the order the trainer runs them: the chain of CHAIN's phases (a phase is
    there only when both its ends were seen), the rollout server's and each step's parts, the total (the exit,
    else wall_s: a killed trainer) and what no phase accounts for. exit_s: when the process exited (None:
    killed); steps: verl's metrics per step (parse_metrics), for the step times and their parts."""
    found, reported = milestones(lines, launch_wall, rollout)
    if exit_s is not None:
        found["exit"] = exit_s
    for step in (1, 2):
        seconds = steps.get(step, {}).get("timing_s/step")
        if f"step{step}_end" in found and isinstance(seconds, (int, float)) and seconds >= 0:
            found[f"step{step}_start"] = found[f"step{step}_end"] - seconds
    out: dict[str, float] = {}
    previous = "launch"
    for milestone, name in CHAIN:
        start, end = found.get(previous), found.get(milestone)
        previous = milestone
        if start is None or end is None or end - start < -CLOCK_SLACK_S:
            continue  # a marker missing, or two that contradict each other: no phase rather than a wrong one
        out[f"phase/{name}_s"] = max(0.0, end - start)
        if name in ("step1", "step2"):  # its start came from verl's own step time: report that, unrounded
            out[f"phase/{name}_s"] = steps[int(name[-1])]["timing_s/step"]
        if name == "rollout_server":
            out.update(_rollout_parts(found, reported, rollout))
        elif name in ("step1", "step2"):
            out.update(_step_parts(name, steps.get(int(name[-1]), {})))
    total = found.get("exit", wall_s if wall_s is not None else max(found.values()))
    if total > 0:
        out["phase/total_s"] = total
        top = sum(v for k, v in out.items() if k.count("/") == 1 and k != "phase/total_s")
        out["phase/unattributed_s"] = max(0.0, total - top)
    return out


def _rollout_parts(found: dict[str, float], reported: dict[str, float], rollout: dict | None) -> dict[str, float]:
    out = {}
    if "serve_args" in found and "reward_ready" in found and found["serve_args"] >= found["reward_ready"]:
        out["phase/rollout_server/server_process_s"] = found["serve_args"] - found["reward_ready"]
    # The row's order of the rollout server's parts (FlashInfer's autotune among them), else its reports, then autotune.
    order = (rollout or {}).get("parts") or [*(r["name"] for r in (rollout or {}).get("reports", [])), "autotune"]
    for name in order:
        if name in reported:
            out[f"phase/rollout_server/{name}_s"] = reported[name]
    return out


def _step_parts(name: str, metrics: dict[str, float]) -> dict[str, float]:
    timers = {key.removeprefix("timing_s/"): value for key, value in metrics.items()
              if key.startswith("timing_s/") and key != "timing_s/step"}
    ordered = [t for t in STEP_TIMERS if t in timers] + sorted(set(timers) - set(STEP_TIMERS))
    return {f"phase/{name}/{t}_s": timers[t] for t in ordered}


def timed_log_header(launch_wall: float) -> str:
    return f"# verlenv trainer log: launch_wall={launch_wall:.3f}\n"


def timed_log_line(line: Line) -> str:
    return f"{'' if line.arrival is None else f'{line.arrival:.3f}'}\t{line.text}\n"


def write_timed_log(path: str, lines: list[Line], launch_wall: float) -> None:
    """The trainer's output with each line's arrival, for reading back with read_timed_log (atomically)."""
    import os
    import tempfile

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(timed_log_header(launch_wall))
            f.writelines(timed_log_line(line) for line in lines)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_timed_log(text: str) -> tuple[list[Line], float | None]:
    """What write_timed_log wrote: (lines, launch_wall)."""
    lines, launch_wall = [], None
    for raw in text.splitlines():
        arrival, sep, body = raw.partition("\t")
        if not sep:  # the header (and comments a fixture adds): every output line has a tab
            if raw.startswith("# verlenv trainer log: launch_wall="):
                launch_wall = float(raw.split("=", 1)[1])
            continue
        lines.append(Line(float(arrival) if arrival else None, body))
    return lines, launch_wall
