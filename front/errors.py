"""Errors of the front (one base class, a subclass of the data plane's)."""

from __future__ import annotations

from core.errors import DataPlaneError

__all__ = ["FrontError", "RequestRejectedError"]


class FrontError(DataPlaneError):
    """Base class of the front's errors."""


class RequestRejectedError(FrontError):
    """A request the front refuses: HTTP ``status``, a short ``error`` code and a ``reason``."""

    def __init__(
        self,
        status: int,
        error: str,
        reason: str,
        retry_after_s: float | None = None,
        details: dict[str, object] | None = None,
    ):
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason
        self.retry_after_s = retry_after_s  # load shedding (429/503): when a retry may succeed
        self.details = details or {}  # more fields of the JSON answer (``max_frames``)
