"""What a probe answers: ok, a problem (with the knowledge-base failure it is and the fix), a warning (a hazard
that does not fail the env), or skipped with the reason."""

from dataclasses import dataclass, field

from verlenv.doctor import knowledge

STATUSES = ("ok", "problem", "warning", "skipped")


@dataclass
class ProbeResult:
    name: str
    status: str  # one of STATUSES
    summary: str
    failure_id: str | None = None
    fix: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"probe": self.name, "status": self.status, "summary": self.summary, "id": self.failure_id,
                "fix": self.fix, "details": self.details}


def ok(name, summary, **details):
    return ProbeResult(name, "ok", summary, details=details)


def skipped(name, reason, **details):
    return ProbeResult(name, "skipped", reason, details=details)


def _steps(failure_id: str, fix) -> list[str]:
    if fix:
        return list(fix)
    f = knowledge.by_id(failure_id)
    return [*f.fix, *([f"verlenv: {f.verlenv}"] if f.verlenv else [])]


def problem(name, summary, failure_id, fix=None, **details):
    return ProbeResult(name, "problem", summary, failure_id, _steps(failure_id, fix), details)


def warning(name, summary, failure_id, fix=None, **details):
    """A hazard worth knowing (a pip that installs elsewhere): reported, but the env does not fail for it."""
    return ProbeResult(name, "warning", summary, failure_id, _steps(failure_id, fix), details)
