"""Errors a user can meet: one line, an exit code, no traceback."""


class UserError(Exception):
    """Bad input or an environment problem the user must fix (exit 2 unless told otherwise)."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


class Terminated(BaseException):
    """SIGTERM (a job scheduler's or `kill`'s): unwinds like Ctrl-C, so builds stop and temp files go."""
