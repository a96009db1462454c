"""Errors of the control plane (one base class, a subclass of the data plane's)."""

from __future__ import annotations

from core.errors import DataPlaneError

__all__ = ["ControlError", "RegistrationConflictError", "RegistrationError"]


class ControlError(DataPlaneError):
    """Base class of the control plane's errors."""


class RegistrationError(ControlError):
    """An app spec that cannot be registered; ``problems`` lists every reason (one line each)."""

    def __init__(self, problems: list[str], name: str = ""):
        count = len(problems)
        head = f"app {name!r}: " if name else ""
        super().__init__(f"{head}{count} problem{'s' if count != 1 else ''}: " + "; ".join(problems))
        self.problems = list(problems)
        self.name = name


class RegistrationConflictError(ControlError):
    """Another registration of the same app was stored between this one's read and write."""
