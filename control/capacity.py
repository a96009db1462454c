"""Hardware classes that cannot grow: the planner treats them as unavailable for new capacity.

A class whose Auto Scaling group is at its MaxSize (its desired capacity there already) can have no
more instances than it has: the epoch plans it with at most that many machines per app (the solve's
machine caps, :func:`control.problems.solve_within_caps`), so the load beyond goes to another class
instead of being clamped by the group and left unserved. A group with MaxSize 0 can launch nothing:
the class is left out. A class whose launches EC2 refused on a quota (a vCPU quota of 0, or below
what the group asked for) is left out like any failed launch (``unavailable_s``, control/config.py)
and named as a quota in the epoch summary. ``skinflint status`` shows both.

Pure: the epoch passes the groups' states it read (``core/adapters/autoscaling.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from core.adapters.autoscaling import GroupState

__all__ = ["QUOTA_MARKERS", "GrowthLimit", "growth_limits", "launch_refusal", "machine_caps"]

# EC2's words for a launch refused on an account limit (scaling activities' status messages):
# VcpuLimitExceeded (On-Demand vCPU quota), MaxSpotInstanceCountExceeded (Spot), InstanceLimitExceeded
QUOTA_MARKERS = (
    "VcpuLimitExceeded",
    "vCPU capacity",
    "MaxSpotInstanceCountExceeded",
    "InstanceLimitExceeded",
)


@dataclass(frozen=True)
class GrowthLimit:
    """The most instances a class may have now (``most``; 0: none) and why, in one line."""

    most: int
    why: str


def growth_limits(states: Mapping[str, GroupState]) -> dict[str, GrowthLimit]:
    """hardware -> its limit, for every group that cannot add an instance: MaxSize 0, or its
    desired capacity at its MaxSize."""
    out: dict[str, GrowthLimit] = {}
    for hw, group in sorted(states.items()):
        if group.max_size <= 0:
            out[hw] = GrowthLimit(0, f"Auto Scaling group {group.name} has MaxSize 0: no instance can launch")
        elif group.desired >= group.max_size:
            out[hw] = GrowthLimit(
                group.max_size,
                f"at its MaxSize {group.max_size} ({group.in_service} in service): no new capacity, "
                f"planned with at most {group.max_size} machine(s) per app",
            )
    return out


def machine_caps(configured: Mapping[str, int], limits: Mapping[str, GrowthLimit]) -> dict[str, int]:
    """The solve's machine caps: the configured ones (``SKINFLINT_MACHINE_CAPS``), lowered to what
    each class that cannot grow has (classes with none are left out of planning instead)."""
    caps = dict(configured)
    for hw, limit in limits.items():
        if limit.most > 0:
            caps[hw] = min(caps.get(hw, limit.most), limit.most)
    return caps


def launch_refusal(message: str) -> str:
    """A failed launch's status message as the epoch summary says it: ``quota: ...`` when EC2
    refused it on an account limit."""
    if any(marker.lower() in message.lower() for marker in QUOTA_MARKERS):
        return f"quota: {message}"
    return message
