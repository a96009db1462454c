"""The CLI's error contract: a user error exits non-zero with one line on stderr, never a traceback."""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """A user-facing failure: ``str(err)`` is the one line printed, ``exit_code`` the status."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code
