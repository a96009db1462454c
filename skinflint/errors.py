"""The CLI's error contract: a user error exits non-zero with one line on stderr, never a traceback.

:class:`SkinflintError` is the base of every error the ``skinflint`` package raises: the CLI's
:class:`UsageError` (which ``skinflint/cli.py`` prints), the local stack's ``StackError`` and the
report's ``ReportError`` (which the commands turn into a :class:`UsageError` naming what failed)."""

from __future__ import annotations

__all__ = ["SkinflintError", "UsageError"]


class SkinflintError(Exception):
    """Base of every error of the ``skinflint`` package."""


class UsageError(SkinflintError):
    """A user-facing failure: ``str(err)`` is the one line printed, ``exit_code`` the status."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code
