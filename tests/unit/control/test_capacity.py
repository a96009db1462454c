"""control/capacity.py: which classes cannot grow, the caps the solve gets, quota refusals named."""

from __future__ import annotations

import pytest

from control.capacity import GrowthLimit, growth_limits, launch_refusal, machine_caps
from core.adapters.autoscaling import GroupState


def group(desired: int, max_size: int, in_service: int = 0) -> GroupState:
    return GroupState("g", desired=desired, min_size=0, max_size=max_size, in_service=in_service, pending=0)


@pytest.mark.parametrize(
    ("state", "most"),
    [
        (group(3, 10), None),  # room to grow: no limit
        (group(10, 10, 9), 10),  # desired at MaxSize: no new capacity, at most 10
        (group(12, 10), 10),  # above (a lowered MaxSize): still at most 10
        (group(0, 0), 0),  # MaxSize 0: nothing can launch
    ],
)
def test_growth_limits(state: GroupState, most: int | None) -> None:
    got = growth_limits({"t4": state}).get("t4")
    assert (got.most if got else None) == most


def test_machine_caps_lower_the_configured_ones_and_skip_classes_left_out() -> None:
    limits = {
        "t4": GrowthLimit(2, "at max"),
        "cpu": GrowthLimit(8, "at max"),
        "v100": GrowthLimit(0, "max 0"),
    }
    # t4: min(configured 5, 2) = 2; cpu: min(configured 4, 8) = 4; v100: left out, not capped
    assert machine_caps({"t4": 5, "cpu": 4}, limits) == {"t4": 2, "cpu": 4}
    assert machine_caps({}, {}) == {}


@pytest.mark.parametrize(
    ("message", "quota"),
    [
        (
            "You have requested more vCPU capacity than your current vCPU limit of 0 allows (VcpuLimitExceeded)",
            True,
        ),
        ("Max spot instance count exceeded (MaxSpotInstanceCountExceeded)", True),
        ("We currently do not have sufficient g4dn.xlarge capacity (InsufficientInstanceCapacity).", False),
    ],
)
def test_launch_refusals_on_a_quota_are_named(message: str, quota: bool) -> None:
    assert launch_refusal(message).startswith("quota: ") is quota
