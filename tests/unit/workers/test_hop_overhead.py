"""The latency-only hop in the data plane: a worker's assignment carries its group's hop apart from the
device time it emulates, and early drop keeps each child's hop in reserve (core.schema.min_tail_s)."""

from __future__ import annotations

from core.schema import Deployment
from planner.models import MachineGroup, ModulePlan, Plan
from planner.packing import Share
from workers.shares import assignment_for


def _group(duration: float, hop: float) -> MachineGroup:
    return MachineGroup(
        hardware="t4", batch=2, machines=1, rate_per_machine=10.0, duration_s=duration, overhead_s=hop
    )


def _deployment(det_hop: float, car_hop: float) -> Deployment:
    plan = Plan(
        objective="billed",
        cost_per_hour=1.0,
        billed_per_hour=1.0,
        solve_ms=0.0,
        modules={
            "det": ModulePlan(latency_budget_s=0.5, worst_case_latency_s=0.4, groups=[_group(0.1, det_hop)]),
            "car": ModulePlan(latency_budget_s=0.5, worst_case_latency_s=0.4, groups=[_group(0.05, car_hop)]),
        },
    )
    return Deployment(
        app="cams",
        version=1,
        origin_s=0.0,
        slo_s=1.0,
        frame_rate=4.0,
        roots=["det"],
        edges=[("det", "car", 1.5)],
        plan=plan,
        queues={"det": {"0/0": "q-det"}, "car": {"0/0": "q-car"}},
        overhead_s=0.03,
    )


def test_an_assignment_carries_its_groups_hop_and_emulates_the_device_time_only() -> None:
    share = Share(app="cams", module="det", group=0, machine=0, hardware="t4", batch=2, concurrency=1,
                  duration_s=0.1, rate=10.0, occupancy=0.5)  # fmt: skip
    dep = _deployment(det_hop=0.03, car_hop=0.03)
    assignment = assignment_for(share, dep, "i-1", lambda _d, _s: ("emulated", "det-net", None, 1))
    # the hop is planned apart (overhead_s), so the 0.1 s of device time is all the emulation sleeps
    assert assignment.overhead_s == 0.03
    assert assignment.duration_s == 0.1 and assignment.model_s == 0.1


def test_early_drop_keeps_each_childs_hop_in_reserve() -> None:
    # below det: car's 0.05 s of device time + the 0.03 s hop that delivers it = 0.08 s
    assert _deployment(det_hop=0.03, car_hop=0.03).min_tail_s("det") == 0.05 + 0.03
    assert _deployment(det_hop=0.0, car_hop=0.0).min_tail_s("det") == 0.05
    assert _deployment(det_hop=0.03, car_hop=0.03).min_tail_s("car") == 0.0
