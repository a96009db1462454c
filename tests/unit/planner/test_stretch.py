"""Longer windows above the children (planner/robust/stretch.py) and the dispatch-aware solve's use of them."""

from __future__ import annotations

import pytest

import planner.robust.dispatchable
from planner.check import check_plan
from planner.generate import generate_problem
from planner.generate_large import generate_large_problems
from planner.models import MachineGroup, ModulePlan, Plan, ProblemSpec
from planner.robust import realise, solve_dispatchable
from planner.robust.stretch import stretch_windows
from planner.simulator import simulate

HW = {"cpu": {"price_per_hour": 0.5}}


def _module(
    batch: int, duration: float, machines: int, per_machine: float, rate: float, budget: float
) -> ModulePlan:
    group = MachineGroup(
        hardware="cpu",
        batch=batch,
        concurrency=1,
        duration_s=duration,
        machines=machines,
        rate_per_machine=per_machine,
    )
    window_rate = machines * per_machine
    return ModulePlan(
        latency_budget_s=budget,
        worst_case_latency_s=duration + batch / window_rate,
        dummy_rate=window_rate - rate,
        groups=[group],
        rate=rate,
        occupancy_per_hour=machines * 0.5 * per_machine / (batch / duration),
        billed_per_hour=machines * 0.5,
    )


def _chain() -> tuple[ProblemSpec, Plan]:
    """Root a, 5 frames/s on one batch-1 machine of 50 req/s (d = 0.02 s) filled with 45 req/s of dummy
    load: windows of 0.02 s, Theorem 1 0.04 s, budget 0.3 s. Each frame sends 2 requests to b."""
    problem = ProblemSpec(
        slo_s=0.5,
        hardware=HW,
        modules={
            "a": {"rate": 5.0, "profile": [{"hardware": "cpu", "batch": 1, "duration_s": 0.02}]},
            "b": {"rate": 10.0, "profile": [{"hardware": "cpu", "batch": 2, "duration_s": 0.02}]},
        },
        edges=[("a", "b")],
    )
    modules = {"a": _module(1, 0.02, 1, 50.0, 5.0, 0.3), "b": _module(2, 0.02, 1, 100.0, 10.0, 0.2)}
    plan = Plan(objective="billed", cost_per_hour=1.0, billed_per_hour=1.0, solve_ms=0.0, modules=modules)
    return problem, plan


def test_a_parent_takes_the_longest_windows_its_slack_allows() -> None:
    problem, plan = _chain()
    # the whole slack: 1 / (0.3 - 0.02) = 3.57 req/s of windows would do, but never below the 5 frames/s
    full = stretch_windows(problem, plan, 1.0)
    a = full.modules["a"]
    assert a.groups[0].rate_per_machine == pytest.approx(5.0) and a.dummy_rate == pytest.approx(0.0)
    assert a.worst_case_latency_s == pytest.approx(0.02 + 1 / 5.0)
    # half of it: Theorem 1 0.04 + 0.5 * (0.3 - 0.04) = 0.17 s, windows of 0.15 s (6.67 req/s)
    half = stretch_windows(problem, plan, 0.5).modules["a"]
    assert half.worst_case_latency_s == pytest.approx(0.17)
    assert half.groups[0].rate_per_machine == pytest.approx(1 / 0.15)
    assert half.dummy_rate == pytest.approx(1 / 0.15 - 5.0)
    # the leaf keeps its windows, the bill is the same machines, the occupancy is the real load's
    assert full.modules["b"] == plan.modules["b"]
    assert full.billed_per_hour == plan.billed_per_hour
    assert a.model_extra["occupancy_per_hour"] == pytest.approx(0.5 * 5.0 / 50.0)
    assert full.cost_per_hour == pytest.approx(
        0.5 * 5.0 / 50.0 + plan.modules["b"].model_extra["occupancy_per_hour"]
    )
    assert check_plan(problem, full) == [] and check_plan(problem, plan) == []


def test_longer_windows_above_a_child_lower_what_it_needs() -> None:
    # windows of 0.02 s may each hold a frame (a root's frames are not spaced): b needs 2 per 0.02 s;
    # at the frames' own rate (windows of 0.2 s) 2 per 0.2 s, its own rate
    problem, plan = _chain()
    before, after = realise(problem, plan)["b"], realise(problem, stretch_windows(problem, plan, 1.0))["b"]
    assert before.required_rate == pytest.approx(100.0)
    assert after.required_rate == pytest.approx(10.0)


def test_nothing_to_stretch() -> None:
    problem, plan = _chain()
    assert stretch_windows(problem, plan, 0.0) is plan
    # a module at its budget already, or with several configurations, keeps its windows
    tight = plan.model_copy(
        update={
            "modules": {**plan.modules, "a": plan.modules["a"].model_copy(update={"latency_budget_s": 0.04})}
        }
    )
    assert stretch_windows(problem, tight, 1.0) is tight
    two = plan.modules["a"].model_copy(
        update={"groups": [plan.modules["a"].groups[0]] * 2, "dummy_rate": 95.0, "worst_case_latency_s": 0.03}
    )
    multi = plan.model_copy(update={"modules": {**plan.modules, "a": two}})
    assert stretch_windows(problem, multi, 1.0) is multi
    with pytest.raises(ValueError, match="within 0..1"):
        stretch_windows(problem, plan, 1.5)


def _unstretched(problem: ProblemSpec, monkeypatch: pytest.MonkeyPatch) -> Plan:
    with monkeypatch.context() as m:
        m.setattr(planner.robust.dispatchable, "STRETCHES", (0.0,))
        return solve_dispatchable(problem)


def test_the_solve_is_never_dearer_for_trying_longer_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    cheaper = 0
    for seed in range(40):
        problem = generate_problem(seed)
        plan, before = solve_dispatchable(problem), _unstretched(problem, monkeypatch)
        assert plan.billed_per_hour <= before.billed_per_hour + 1e-9, seed
        cheaper += plan.billed_per_hour < before.billed_per_hour - 1e-9
    assert cheaper >= 1  # generated problems 3 and 7 (docs/dispatch.md)


def test_a_stretched_plan_is_what_the_simulator_measures(monkeypatch: pytest.MonkeyPatch) -> None:
    # a 9-module out-tree whose root (7 frames/s) ran on a machine of 67 req/s: its children needed
    # 200 req/s for bursts every 15 ms; with the root's windows at its slack the plan bills a third
    problem = generate_large_problems(23, 0)[22]
    plan = solve_dispatchable(problem)
    assert plan.billed_per_hour < 0.5 * _unstretched(problem, monkeypatch).billed_per_hour
    assert check_plan(problem, plan) == []
    report = simulate(problem, plan, 3.0)
    for name, module in report.modules.items():
        assert module.overflow_batches == 0, name
        assert module.measured_worst_case_s <= plan.modules[name].worst_case_latency_s + 1e-9, name
    assert report.end_to_end.slo_attainment == 1.0


def test_a_spent_budget_tries_no_stretch_once_a_plan_realises(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = generate_large_problems(23, 0)[22]  # realisable unstretched (at 3x the stretched bill)
    spent = solve_dispatchable(problem, should_stop=lambda: True)
    with monkeypatch.context() as m:
        m.setattr(planner.robust.dispatchable, "STRETCHES", (0.0,))
        unstretched = solve_dispatchable(problem, should_stop=lambda: True)
    assert spent.billed_per_hour == unstretched.billed_per_hour
    assert spent.billed_per_hour > solve_dispatchable(problem).billed_per_hour
