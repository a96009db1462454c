"""`skinflint bench fleet`'s epoch timing: the registered epoch (every app's registration plan as its
seed) plans the fleet the cold epoch plans."""

from __future__ import annotations

from typing import TYPE_CHECKING

import bench.fleet.changes
from bench.fleet import (
    changed_problems,
    epoch_times,
    load_occupancy,
    one_fleet,
    solver_for,
    steady,
    steady_run,
)
from planner.fleet import RealisationCache, plan_fleet
from planner.generate import generate_problems
from planner.models import MachineGroup, ModulePlan, ModuleSpec, Plan, ProblemSpec, ProfileEntry

if TYPE_CHECKING:
    import pytest


def test_registered_epoch_is_timed_and_plans_the_cold_fleet() -> None:
    problems = {f"app{i}": p for i, p in enumerate(generate_problems(4, 11))}
    out = epoch_times(problems, 1, "dispatchable")
    assert out["seeded_apps"] == out["planned"] > 0
    assert out["same_fleet_seeded"] is True
    assert out["registered_cpu"]["median_ms"] > 0 and out["registration_solve_cpu"]["max_ms"] > 0
    plain = epoch_times(problems, 1, "plain")  # registration solves with the control loop's solver only
    assert plain["registered_cpu"] is None and plain["seeded_apps"] == 0


def test_steady_run_summary_names_the_types_over_the_target() -> None:
    problems = {f"app{i}": p for i, p in enumerate(generate_problems(3, 7))}
    out = steady(problems, 8, 0.05, 7)
    row = steady_run(2, out, 3, 5)
    assert (row["fleet_seed"], row["noise_seed"], row["apps"]) == (5002, 7, 3)
    assert row["max_changes_per_2_epochs"] == out["max_changes_per_2_epochs"]
    over = {h for h, v in out["per_hardware"].items() if v["max_changes_per_2_epochs"] > 1}
    assert set(row["types_over"]) == over
    assert row["changes"] == sum(v["changes"] for v in out["per_hardware"].values())


def test_changed_problems_are_timed_solved_at_once_and_within_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problems = {f"app{i}": p for i, p in enumerate(generate_problems(4, 11))}
    first = plan_fleet(problems, solver=solver_for("dispatchable"), cache=RealisationCache())
    held = changed_problems(problems, first, "dispatchable", "prices", budget_s=0.0, max_epochs=1)
    assert held["changed_apps"] == 4 and held["epochs"][0]["carried"] == 4 and not held["converged"]
    out = changed_problems(problems, first, "dispatchable", "prices", budget_s=600.0)
    assert out["converged"] and out["same_solved_plans"] and len(out["epochs"]) == 1
    assert out["epochs"][0]["resolved"] == 4
    monkeypatch.setattr(bench.fleet.changes, "RAMP", 1.6)  # past these small plans' capacity
    ramp = changed_problems(problems, first, "dispatchable", "ramp", budget_s=600.0)
    assert ramp["converged"] and ramp["same_solved_plans"] and ramp["changed_apps"] > 0


def test_cold_epochs_give_quick_plans_past_the_budget_and_converge_with_it() -> None:
    problems = {f"app{i}": p for i, p in enumerate(generate_problems(4, 11))}
    first = plan_fleet(problems, solver=solver_for("dispatchable"), cache=RealisationCache())
    tight = changed_problems(problems, first, "dispatchable", "cold", budget_s=0.0, max_epochs=1)
    epoch = tight["epochs"][0]
    assert tight["changed_apps"] == 4 and not tight["converged"]
    assert epoch["quick"] == epoch["carried"] == 3  # the first app solved in full: no mean yet
    out = changed_problems(problems, first, "dispatchable", "cold", budget_s=600.0)
    assert out["converged"] and out["same_solved_plans"] and len(out["epochs"]) == 1
    assert out["epochs"][0]["quick"] == 0


def test_load_occupancy_fills_groups_in_dispatch_order() -> None:
    entry = ProfileEntry(hardware="t4", batch=4, duration_s=0.02, concurrency=1)
    problem = ProblemSpec(
        name="a",
        slo_s=1.0,
        modules={"m": ModuleSpec(rate=250.0, profile=[entry])},
        edges=[],
        hardware={"t4": {"price_per_hour": 0.5}, "cpu": {"price_per_hour": 0.1}},
    )
    groups = [  # t4: 200 req/s per machine (4 / 0.02); cpu: 50 req/s per machine (2 / 0.04)
        MachineGroup(
            hardware="t4", batch=4, duration_s=0.02, concurrency=1, machines=1, rate_per_machine=200.0
        ),
        MachineGroup(
            hardware="cpu", batch=2, duration_s=0.04, concurrency=1, machines=2, rate_per_machine=40.0
        ),
    ]
    module = ModulePlan(latency_budget_s=1.0, worst_case_latency_s=0.1, groups=groups)
    plan = Plan(
        objective="billed", cost_per_hour=0.0, billed_per_hour=0.7, solve_ms=0.0, modules={"m": module}
    )
    # 200 req/s fill the t4 machine (all of its time: 0.5 $/h); the last 50 take 50 / 50 of a cpu
    # machine's time (0.1 $/h); the cpu machines' other 30 req/s of planned load are held capacity
    got = load_occupancy({"a": plan}, {"a": problem}, {"t4": 0.5, "cpu": 0.1})
    assert abs(got - 0.6) < 1e-12


def test_one_fleet_reports_where_the_bill_goes() -> None:
    problems = {f"app{i}": p for i, p in enumerate(generate_problems(5, 3))}
    out = one_fleet(problems)
    # requests <= plans' occupancy <= billed, and the packer's ratio is the bill over the plans'
    assert 0 < out["load_occupancy"] <= out["plans_occupancy"] + 1e-9 <= out["billed"] + 2e-9
    assert abs(out["packing_ratio"] - out["billed"] / out["plans_occupancy"]) < 1e-12
    assert out["packing_ratio"] >= 1 - 1e-9
