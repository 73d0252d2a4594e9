"""verlenv doctor: recognise known environment failures in logs and in live environments, and say the fix."""

from verlenv.doctor.logs import diagnose_path, diagnose_text
from verlenv.doctor.matcher import (
    Diagnosis,
    diagnose_lines,
    format_diagnoses,
)

__all__ = ["Diagnosis", "diagnose_lines", "diagnose_path", "diagnose_text", "format_diagnoses"]
