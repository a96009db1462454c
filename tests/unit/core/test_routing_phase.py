"""The front's routing honours a module's schedule phase (aligned duty cycles, docs/packing.md)."""

from __future__ import annotations

import pytest

from core.routing import Router
from core.schema import Deployment
from planner.dispatch import build_schedules
from planner.models import MachineGroup, ModulePlan, Plan


def test_router_honours_a_module_schedule_phase():
    g = MachineGroup(hardware="t4", batch=2, machines=1, rate_per_machine=10, duration_s=0.05)
    mp = ModulePlan(latency_budget_s=0.3, worst_case_latency_s=0.25, groups=[g])
    plan = Plan(objective="billed", cost_per_hour=0.1, billed_per_hour=1, solve_ms=0, modules={"m": mp})
    dep = Deployment(
        app="x", version=1, origin_s=1000.33, slo_s=1.0, frame_rate=10, roots=["m"], edges=[], plan=plan,
        queues={"m": {"0/0": "q"}},
    )  # fmt: skip
    phased = dep.model_copy(
        update={
            "plan": plan.model_copy(
                update={"modules": {"m": mp.model_copy(update={"schedule_phase_s": 0.05})}}
            )
        }
    )
    # one window of 0.2 s: without a phase the windows close at 1000.53, 1000.73, ...; with the module's
    # phase 0.05 (mod 0.2) at 1000.45, 1000.65, ... for fronts and workers alike
    plain_route = Router(dep, build_schedules(dep.plan)).route("m", 1000.4)
    assert plain_route.window_end == pytest.approx(1000.53)
    router = Router(phased, build_schedules(phased.plan))
    assert router.origin("m") == pytest.approx(1000.25)
    r = router.route("m", 1000.4)
    assert r.window_end == pytest.approx(1000.45) and r.module_deadline == pytest.approx(1000.5)
    assert router.route("m", 1000.46).window_end == pytest.approx(1000.65)
