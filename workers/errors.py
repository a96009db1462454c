"""Errors of the instance runtime (one base class for the package)."""

from __future__ import annotations

__all__ = ["WorkerError"]


class WorkerError(Exception):
    """Base class of the errors the workers package raises itself (adapter failures stay
    ``core.errors.DataPlaneError``s)."""
