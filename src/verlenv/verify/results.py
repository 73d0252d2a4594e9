"""One check's outcome, shared by the static checks, the kernel scripts and the report."""

from dataclasses import asdict, dataclass, field

# warn: it runs, but not as intended (e.g. only PTX for the GPU: JIT-compiled at first use).
STATUSES = ("pass", "warn", "fail", "skip")
KINDS = ("static", "kernel")
# The reason states only the request: a package is skipped where it is not installed, or where another run covers it.
SKIPPED_BY_REQUEST = "skipped by request (--skip-package)"


@dataclass
class CheckResult:
    name: str
    package: str
    kind: str
    status: str
    reason: str = ""
    required: bool = False
    numbers: dict = field(default_factory=dict)
    seconds: float = 0.0
    # Output of a failed process (last lines) and what the doctor recognised in it.
    log: str = ""
    diagnosis: list[dict] = field(default_factory=list)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"check {self.name}: status {self.status!r} is not one of {', '.join(STATUSES)}")
        if self.kind not in KINDS:
            raise ValueError(f"check {self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}")

    @property
    def blocking(self) -> bool:
        """A failure that makes the run fail."""
        return self.required and self.status == "fail"

    def to_dict(self) -> dict:
        return asdict(self)


def not_run(result: CheckResult) -> bool:
    """A required check that did not run for want of what this machine lacks (a GPU, its driver, a GPU build),
    not because the user asked: its claim is not proven by this run."""
    return result.required and result.status == "skip" and not result.reason.startswith("skipped by request")


# A run's verdict, the JSON's `result` and the screen's head alike: incomplete = every required check that ran
# passed, but some could not run here (no GPU), so the run proves less than a pass; its exit code stays 0.
RESULTS = ("pass", "incomplete", "fail")


def result_of(required_failed: int, required_not_run: int) -> str:
    return "fail" if required_failed else "incomplete" if required_not_run else "pass"


def totals(results: list[CheckResult]) -> dict:
    out = {s: sum(r.status == s for r in results) for s in STATUSES}
    out["required_failed"] = sum(r.blocking for r in results)
    out["required_not_run"] = sum(not_run(r) for r in results)
    out["checks"] = len(results)
    for kind in KINDS:
        out[kind] = sum(r.kind == kind for r in results)
    return out
