"""What one planning epoch did: :class:`EpochSummary`, the value :meth:`control.epoch.Controller.run_epoch`
returns (its ``as_json`` is the handler's return value and the state's ``last``).

Re-exported by :mod:`control.epoch`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["EpochSummary"]


@dataclass
class EpochSummary:
    """What an epoch did; ``as_json`` is the handler's return value."""

    status: str  # "published" | "unchanged" | "failed" | "skipped"
    epoch: int = 0
    reason: str = ""
    version: int | None = None
    previous: int | None = None
    activate_at: float | None = None
    changed: dict[str, list[str]] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    failed_apps: dict[str, str] = field(default_factory=dict)
    rates: dict[str, dict[str, float]] = field(default_factory=dict)
    rate_window: list[float] = field(default_factory=list)  # [start, end) the observed rates cover
    counts: dict[str, int] = field(default_factory=dict)
    desired: dict[str, int] = field(default_factory=dict)
    scaled: dict[str, list[int]] = field(default_factory=dict)  # hardware -> [from, to]
    excluded_hardware: dict[str, str] = field(default_factory=dict)
    limited_hardware: dict[str, str] = field(default_factory=dict)  # hardware -> why it cannot grow
    billed_per_hour: float = 0.0
    occupancy_per_hour: float = 0.0
    timings_ms: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    gc: dict[str, Any] = field(default_factory=dict)
    sweep: dict[str, Any] = field(default_factory=dict)  # the stranded-frame sweep (control/sweeper.py)
    activation: dict[str, Any] = field(default_factory=dict)  # control.activation.ActivationCheck
    corrections: dict[str, dict[str, float]] = field(default_factory=dict)  # app -> "module@hw" -> s
    # app -> module -> the hop it is planned with: hop_s, source (default | kept | measured), samples
    # (first deliveries in the rate window) and their p99_s (control/hops.py)
    hops: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    seeded: list[str] = field(default_factory=list)  # apps planned with their registration's plan
    # apps on a plan to solve again: made for an earlier problem, or the solve's quick plan
    carried: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)  # apps whose carried plan was replaced
    quick: list[str] = field(default_factory=list)  # apps given the solve's quick plan (also carried)
    # app -> the proven optimality gap of its plan ((cost - certified bound) / cost; 0: proven optimal;
    # None: unknown, e.g. a plan held at new rates) (planner.fleet.keys.proven_gap)
    proven_gaps: dict[str, float | None] = field(default_factory=dict)
    # app -> the admission reserve chosen again for its shed_target at the rate planned (reserves.py)
    reserves: dict[str, dict[str, Any]] = field(default_factory=dict)
    # apps whose shed_target no reserve meets at the rate of their last review (until it is met again)
    unmet_shed_targets: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # app -> model -> hardware classes planned from entries measured on an instance (workers/onsite.py)
    measured_on_instance: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            key: value
            for key, value in self.__dict__.items()
            if value not in (None, {}, []) or key == "status"
        }
