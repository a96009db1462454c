"""EC2 Auto Scaling: one group per hardware type. Read sizes, set the desired capacity, and find
launches that failed (insufficient capacity) so the planner can plan without that hardware."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.adapters._aws import AWS_ERRORS
from core.errors import DataPlaneError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["AutoScalingError", "FleetGroups", "GroupState"]

_FAILED = ("Failed", "Cancelled")


class AutoScalingError(DataPlaneError):
    """An Auto Scaling call failed; ``group`` names the group."""

    def __init__(self, message: str, group: str = ""):
        super().__init__(message)
        self.group = group


@dataclass(frozen=True)
class GroupState:
    name: str
    desired: int
    min_size: int
    max_size: int
    in_service: int
    pending: int


class FleetGroups:
    """``names`` maps a hardware type to its group's name (``SKINFLINT_ASG_NAMES``)."""

    def __init__(self, client: Any, names: Mapping[str, str]):
        self._asg = client
        self.names = dict(names)

    def states(self) -> dict[str, GroupState]:
        """hardware -> its group's sizes, for every group that exists."""
        by_name = {name: key for key, name in self.names.items()}
        out: dict[str, GroupState] = {}
        names = sorted(by_name)
        try:
            for i in range(0, len(names), 50):
                pages = self._asg.get_paginator("describe_auto_scaling_groups").paginate(
                    AutoScalingGroupNames=names[i : i + 50]
                )
                for page in pages:
                    for group in page.get("AutoScalingGroups", []):
                        states = [inst.get("LifecycleState", "") for inst in group.get("Instances", [])]
                        out[by_name[group["AutoScalingGroupName"]]] = GroupState(
                            name=group["AutoScalingGroupName"],
                            desired=int(group["DesiredCapacity"]),
                            min_size=int(group["MinSize"]),
                            max_size=int(group["MaxSize"]),
                            in_service=sum(state == "InService" for state in states),
                            pending=sum(state.startswith("Pending") for state in states),
                        )
        except AWS_ERRORS as exc:
            raise AutoScalingError(f"cannot describe the worker groups: {exc}") from exc
        return out

    def set_desired(self, hardware: str, count: int) -> None:
        name = self.names[hardware]
        try:
            self._asg.set_desired_capacity(
                AutoScalingGroupName=name, DesiredCapacity=int(count), HonorCooldown=False
            )
        except AWS_ERRORS as exc:
            raise AutoScalingError(f"cannot set {name} to {count}: {exc}", group=name) from exc

    def capacity_failures(self, hardware: str, since: float) -> list[str]:
        """Status messages of the group's scaling activities that failed at or after ``since``
        (epoch s): launches EC2 refused (InsufficientInstanceCapacity, Spot capacity, limits)."""
        name = self.names[hardware]
        cutoff = dt.datetime.fromtimestamp(since, dt.UTC)
        out: list[str] = []
        try:
            page = self._asg.describe_scaling_activities(AutoScalingGroupName=name, MaxRecords=50)
        except AWS_ERRORS as exc:
            raise AutoScalingError(
                f"cannot read the scaling activities of {name}: {exc}", group=name
            ) from exc
        for act in page.get("Activities", []):
            start = act.get("StartTime")
            if act.get("StatusCode") in _FAILED and start is not None and start >= cutoff:
                out.append(str(act.get("StatusMessage") or act.get("Description") or act["StatusCode"]))
        return out
