"""Demand from admitted frames (issue #28 item 2) and queues' visibility timeouts (item 9): pure."""

from __future__ import annotations

import pytest

from control.queues import visibility_timeout_for
from core.adapters.rates import ObservedRates
from planner.models import MachineGroup, ModulePlan


def module(*durations: float) -> ModulePlan:
    return ModulePlan(
        latency_budget_s=1.0,
        worst_case_latency_s=1.0,
        groups=[
            MachineGroup(hardware="cpu", batch=1, machines=1, rate_per_machine=1.0, duration_s=d)
            for d in durations
        ],
    )


@pytest.mark.parametrize(
    ("slo_s", "durations", "expected"),
    [
        (2.0, (0.2,), 10),  # 2 + 2 x 0.2 + 1 + 5 = 8.4 -> 9, below the 10 s floor
        (6.0, (0.5, 1.5), 15),  # 6 + 2 x 1.5 + 1 + 5 = 15
        (20.0, (1.0,), 28),  # 20 + 2 + 1 + 5 = 28
        (60.0, (1.0,), 30),  # capped at the 30 s the queues had before
    ],
)
def test_visibility_timeout_covers_the_longest_hold_and_no_more(slo_s, durations, expected):
    assert visibility_timeout_for(slo_s, module(*durations), 1.0, 10, 30) == expected


@pytest.mark.parametrize(
    ("cap", "accepted", "shed", "expected"),
    [
        (None, 20.0, 600.0, 620.0),  # every refusal counted: the flood is planned for
        (0.0, 20.0, 600.0, 20.0),  # admitted frames alone
        (1.5, 20.0, 600.0, 50.0),  # 20 + min(600, 1.5 x 20)
        (1.5, 25.0, 35.0, 60.0),  # a real ramp (3 x the load) still reads in full: 35 <= 37.5
        (1.5, 0.0, 100.0, 0.0),  # refusals alone are no demand
    ],
)
def test_refusals_count_as_demand_up_to_the_cap(cap, accepted, shed, expected):
    assert ObservedRates(None, "NS", shed_cap=cap).demand(accepted, shed) == pytest.approx(expected)


def test_a_negative_cap_is_refused():
    with pytest.raises(ValueError, match="shed_cap"):
        ObservedRates(None, "NS", shed_cap=-1.0)
