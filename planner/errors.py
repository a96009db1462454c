"""Errors raised by the planner. One base class; subclasses carry the data a caller needs."""

from __future__ import annotations

__all__ = ["InfeasibleError", "PlannerError", "ProblemError"]


class PlannerError(Exception):
    """Base class of every error the planner raises."""


class ProblemError(PlannerError):
    """The problem specification is invalid (bad JSON, unknown names, cycles, bad numbers)."""


class InfeasibleError(PlannerError):
    """No plan meets the SLO. ``path`` is the tightest root-to-leaf path and ``min_latency_s``
    the smallest worst-case latency any plan can give it under the policy's latency model."""

    def __init__(self, message: str, path: tuple[str, ...] = (), min_latency_s: float = float("nan")):
        super().__init__(message)
        self.path = path
        self.min_latency_s = min_latency_s
