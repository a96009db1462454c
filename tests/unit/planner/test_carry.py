"""An epoch's solve budget: plans that still serve a changed problem are carried (valid, re-priced) and
solved again in later epochs; once none is carried the result is the epoch without a budget."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from bench.fleet import slowed, without_timings
from planner.check import check_plan
from planner.fleet import CARRIED_KEY, RealisationCache, plan_fleet, realised, seed_plan
from planner.generate import generate_problem
from planner.robust import solve_dispatchable

if TYPE_CHECKING:
    from collections.abc import Callable

    from planner.fleet import FleetResult, Schedules
    from planner.models import Plan, ProblemSpec

APPS = 5


class _Counting:
    """The control loop's solver, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, problem: ProblemSpec, *, schedules: Schedules | None = None) -> Plan:
        self.calls += 1
        return solve_dispatchable(problem, schedules=schedules)


def _dumps(res: FleetResult) -> dict[str, Any]:
    """Every plan's JSON without its timings (they differ from one solve to the next)."""
    return {a: without_timings(p.model_dump(mode="json")) for a, p in res.plans.items()}


def next_epoch(
    problems: dict[str, ProblemSpec],
    last: FleetResult,
    cache: RealisationCache,
    budget: float,
    solver: Callable[..., Plan] | None = None,
) -> FleetResult:
    """The next epoch after ``last`` with a solve budget of ``budget`` s (``solver``: default the
    control loop's, counting its calls)."""
    return plan_fleet(
        problems,
        previous=last.fleet,
        previous_plans=last.plans,
        solver=solver or _Counting(),
        cache=cache,
        solve_budget_s=budget,
    )


def _repriced(problem: ProblemSpec, factor: float) -> ProblemSpec:
    """Every hardware type ``factor`` times its price (throughput-cost order unchanged)."""
    hw = {
        h: s.model_copy(update={"price_per_hour": s.price_per_hour * factor})
        for h, s in problem.hardware.items()
    }
    return problem.model_copy(update={"hardware": hw})


@pytest.fixture(scope="module")
def first() -> tuple[dict[str, ProblemSpec], FleetResult]:
    problems = {f"a{i}": generate_problem(i) for i in range(APPS)}
    return problems, plan_fleet(problems, solver=_Counting(), cache=RealisationCache())


def _billed(problem: ProblemSpec, plan: Plan) -> float:
    return sum(
        g.machines * problem.hardware[g.hardware].price_per_hour
        for mp in plan.modules.values()
        for g in mp.groups
    )


def test_a_price_change_carries_every_plan_that_still_serves(
    first: tuple[dict[str, Any], FleetResult],
) -> None:
    problems, res = first
    cheaper = {a: _repriced(p, 0.9) for a, p in problems.items()}
    solver = _Counting()
    out = plan_fleet(
        cheaper,
        previous=res.fleet,
        previous_plans=res.plans,
        solver=solver,
        cache=RealisationCache(),
        solve_budget_s=0.0,
    )
    assert solver.calls == 0 and out.failed == {} and out.resolved == []
    assert out.carried == sorted(problems) and out.reused == []
    for a, plan in out.plans.items():
        digest = (res.plans[a].model_extra or {})["problem_digest"]
        assert (plan.model_extra or {})[CARRIED_KEY] == {"digest": digest, "sticky": False}
        assert plan.billed_per_hour == pytest.approx(_billed(cheaper[a], plan))
        assert plan.billed_per_hour == pytest.approx(0.9 * res.plans[a].billed_per_hour)
        assert realised(plan) or check_plan(cheaper[a], plan) == []
        worst = max(p["worst_case_latency_s"] for p in (plan.model_extra or {})["paths"])
        assert worst <= cheaper[a].slo_s + 1e-9
    assert out.fleet.billed_per_hour == pytest.approx(0.9 * res.fleet.billed_per_hour)


def test_without_a_budget_every_changed_app_is_solved(first: tuple[dict[str, Any], FleetResult]) -> None:
    problems, res = first
    cheaper = {a: _repriced(p, 0.9) for a, p in problems.items()}
    solver = _Counting()
    out = plan_fleet(
        cheaper, previous=res.fleet, previous_plans=res.plans, solver=solver, cache=RealisationCache()
    )
    assert solver.calls == APPS and out.carried == [] and out.resolved == []
    assert all(CARRIED_KEY not in (p.model_extra or {}) for p in out.plans.values())


def test_carried_plans_are_solved_again_and_end_as_the_unbudgeted_epoch(
    first: tuple[dict[str, Any], FleetResult],
) -> None:
    problems, res = first
    hw0 = sorted(next(iter(problems.values())).hardware)[0]

    def cut(p: ProblemSpec) -> ProblemSpec:  # one type 30 % cheaper: some plans should move to it
        hw = dict(p.hardware)
        if hw0 in hw:
            hw[hw0] = hw[hw0].model_copy(update={"price_per_hour": hw[hw0].price_per_hour * 0.7})
        return p.model_copy(update={"hardware": hw})

    new = {a: cut(p) for a, p in problems.items()}
    ref = plan_fleet(
        new, previous=res.fleet, previous_plans=res.plans, solver=_Counting(), cache=RealisationCache()
    )
    cache = RealisationCache()
    held = next_epoch(new, res, cache, 0.0)
    assert held.carried  # kept this epoch (nothing solved within a zero budget) ...
    again = next_epoch(new, held, cache, 600.0)
    assert again.resolved == held.carried and again.carried == []  # ... solved in the next
    assert _dumps(again) == _dumps(ref)
    assert again.fleet.billed_per_hour == pytest.approx(ref.fleet.billed_per_hour)
    # and once solved, the next epoch reuses them (nothing left to solve)
    last = next_epoch(new, again, cache, 600.0)
    assert last.resolved == [] and last.reused == sorted(problems) and last.carried == []


def _one(first: tuple[dict[str, Any], FleetResult]) -> tuple[ProblemSpec, Plan]:
    problems, res = first
    return problems["a0"], res.plans["a0"]


def _epoch(problem: ProblemSpec, old: Plan) -> tuple[FleetResult, int]:
    solver = _Counting()
    out = plan_fleet(
        {"a0": problem}, previous_plans={"a0": old}, solver=solver, solve_budget_s=0.0, cache=False
    )
    return out, solver.calls


def _slower(problem: ProblemSpec, add_s: float) -> ProblemSpec:
    """Every profile entry ``add_s`` longer (a larger hop overhead, a service-time correction)."""
    return slowed({"a": problem}, add_s)["a"]


def test_a_realised_plan_is_carried_over_longer_service_times(
    first: tuple[dict[str, Any], FleetResult],
) -> None:
    """Longer service times: the dispatch-realised plan is re-timed from the profile (machines carry
    the new throughput, grown where that falls short), realised again and carried when it still meets
    the SLO; the next epoch with a budget solves it."""
    problems, res = first
    slower = {a: _slower(p, 0.002) for a, p in problems.items()}
    cache = RealisationCache()
    held = next_epoch(slower, res, cache, 0.0)
    assert held.carried and held.failed == {}
    for a in held.carried:
        plan, problem = held.plans[a], slower[a]
        assert (plan.model_extra or {})[CARRIED_KEY]["sticky"] is False  # another problem, not rates
        for m, mp in plan.modules.items():
            profile = {(e.hardware, e.batch, e.concurrency): e for e in problem.modules[m].profile}
            for g in mp.groups:
                e = profile[(g.hardware, g.batch, g.concurrency)]
                assert g.duration_s == e.duration_s and g.rate_per_machine <= e.throughput * (1 + 1e-9)
        assert (
            max(p["worst_case_latency_s"] for p in (plan.model_extra or {})["paths"]) <= problem.slo_s + 1e-9
        )
    again = next_epoch(slower, held, cache, 600.0)
    assert again.resolved == held.carried and again.carried == []


def test_a_plain_plan_over_longer_service_times_is_solved(first: tuple[dict[str, Any], FleetResult]) -> None:
    """A plan without dispatch figures has the solver's latency split: it is not re-timed."""
    problem, _ = _one(first)
    old = plan_fleet({"a0": problem}, cache=False).plans["a0"]  # the plain solve
    calls: list[str] = []

    def plain(p: ProblemSpec) -> Plan:
        from planner.solve import solve

        calls.append(p.name)
        return solve(p, objective="billed")

    out = plan_fleet(
        {"a0": _slower(problem, 0.002)}, previous_plans={"a0": old}, solver=plain, solve_budget_s=0.0
    )
    assert calls and out.carried == []


def test_a_plan_on_hardware_no_longer_available_is_solved(first: tuple[dict[str, Any], FleetResult]) -> None:
    problem, old = _one(first)
    used = {g.hardware for mp in old.modules.values() for g in mp.groups}
    gone = sorted(used)[0]
    rest = {h: s for h, s in problem.hardware.items() if h != gone}
    modules = {
        m: spec.model_copy(update={"profile": [e for e in spec.profile if e.hardware != gone]})
        for m, spec in problem.modules.items()
    }
    narrowed = problem.model_copy(update={"hardware": rest, "modules": modules})
    try:
        out, calls = _epoch(narrowed, old)
    except ValueError:  # a generated problem with no other hardware for a module
        pytest.skip("no plan without that hardware")
    assert calls == 1 and out.carried == []


def _scaled(problem: ProblemSpec, factor: float) -> ProblemSpec:
    """Every module's rate ``factor`` times."""
    return problem.model_copy(
        update={
            "modules": {m: s.model_copy(update={"rate": s.rate * factor}) for m, s in problem.modules.items()}
        }
    )


def test_a_rate_that_fell_past_the_hold_is_carried_and_an_slo_below_the_durations_is_solved(
    first: tuple[dict[str, Any], FleetResult],
) -> None:
    problem, old = _one(first)
    out, calls = _epoch(_scaled(_repriced(problem, 0.9), 0.5), old)
    assert calls == 0 and out.carried == ["a0"]  # the same machines serve half the rate
    assert out.plans["a0"].billed_per_hour == pytest.approx(0.9 * old.billed_per_hour)
    worst = max(p["worst_case_latency_s"] for p in (old.model_extra or {})["paths"])
    # a little tighter: more machines shorten the waits, and the grown plan meets it
    tighter = _repriced(problem, 0.9).model_copy(update={"slo_s": worst * 0.98})
    out, calls = _epoch(tighter, old)
    assert calls == 0 and out.carried == ["a0"]
    assert (
        max(p["worst_case_latency_s"] for p in (out.plans["a0"].model_extra or {})["paths"])
        <= worst * 0.98 + 1e-9
    )
    assert out.plans["a0"].billed_per_hour > 0.9 * old.billed_per_hour  # it took more machines
    # far tighter: no number of these machines gets under it
    out, calls = _epoch(_repriced(problem, 0.9).model_copy(update={"slo_s": worst * 0.5}), old)
    assert calls == 1 and out.carried == []


@pytest.mark.parametrize("factor", [1.6, 0.5])
def test_rates_past_the_plan_are_carried_and_solved_as_without_a_budget(
    first: tuple[dict[str, Any], FleetResult], factor: float
) -> None:
    """A ramp: every app's rates rose past its plan (1.6) or fell past the hold band (0.5). Without a
    budget every app is solved (and keeps its plan grown by whole machines, or its configurations, when
    that bills within ``stick`` of the fresh one); with one, the grown plans (the same machines, for a
    fall) serve at once and the apps are solved again later, to the same plans."""
    problems, res = first
    ramp = {a: _scaled(p, factor) for a, p in problems.items()}
    ref = plan_fleet(
        ramp, previous=res.fleet, previous_plans=res.plans, solver=_Counting(), cache=RealisationCache()
    )
    cache = RealisationCache()
    held = next_epoch(ramp, res, cache, 0.0)
    # grown (children raised to what their parents' bursts need) and carried; one that would not realise
    # within the SLO would be solved now
    assert held.failed == {} and len(held.carried) >= 3
    for a, plan in held.plans.items():
        if a not in held.carried:
            assert CARRIED_KEY not in (plan.model_extra or {})
            continue
        assert (plan.model_extra or {})[CARRIED_KEY]["sticky"] is True
        for m, mp in plan.modules.items():  # grown where they rose: the plan carries the new rates
            assert sum(g.machines * g.rate_per_machine for g in mp.groups) >= ramp[a].modules[m].rate * (
                1 - 1e-9
            )
        worst = max(p["worst_case_latency_s"] for p in (plan.model_extra or {})["paths"])
        assert worst <= ramp[a].slo_s + 1e-9
    again = next_epoch(ramp, held, cache, 600.0)
    assert again.resolved == held.carried and again.carried == []
    assert _dumps(again) == _dumps(ref)


def test_a_price_change_that_reorders_the_groups_is_solved() -> None:
    """The dispatch serves groups in throughput-cost order: a new order changes the worst cases."""
    problem = generate_problem(23)  # its plan runs one module on two hardware types
    old = plan_fleet({"a": problem}, solver=_Counting(), cache=False).plans["a"]
    mixed = [mp for mp in old.modules.values() if len({g.hardware for g in mp.groups}) > 1]
    assert mixed
    top = mixed[0].groups[0].hardware
    hw = dict(problem.hardware)
    dearer = problem.model_copy(
        update={"hardware": hw | {top: hw[top].model_copy(update={"price_per_hour": 1e4})}}
    )
    solver = _Counting()
    out = plan_fleet({"a": dearer}, previous_plans={"a": old}, solver=solver, solve_budget_s=0.0, cache=False)
    assert solver.calls == 1 and out.carried == []
    # the same plan at prices that keep the order is carried
    kept = plan_fleet(
        {"a": _repriced(problem, 1.1)},
        previous_plans={"a": old},
        solver=solver,
        solve_budget_s=0.0,
        cache=False,
    )
    assert solver.calls == 1 and kept.carried == ["a"]


def test_a_seed_for_an_older_price_list_is_carried(first: tuple[dict[str, Any], FleetResult]) -> None:
    problems, _ = first
    problem = problems["a1"]
    seed = seed_plan(problem, solve_dispatchable(problem), "skinflint")
    solver = _Counting()
    out = plan_fleet(
        {"a1": _repriced(problem, 1.2)}, seeds={"a1": seed}, solver=solver, solve_budget_s=0.0, cache=False
    )
    assert solver.calls == 0 and out.seeded == [] and out.carried == ["a1"]
    assert out.plans["a1"].billed_per_hour == pytest.approx(1.2 * seed.billed_per_hour)


def test_a_bad_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="solve_budget_s"):
        plan_fleet({}, solve_budget_s=-1.0)
    with pytest.raises(ValueError, match="solve_budget_s"):
        plan_fleet({}, solve_budget_s=float("inf"))


def test_a_grown_plan_raises_the_children_its_parents_bursts_outgrew() -> None:
    """More machines of a parent send bigger or denser bursts: the child grown only to its new rate no
    longer realises; grown to what its spread needs, it does (and stays a valid plan)."""
    from planner.fleet import redispatch
    from planner.fleet.carry import _grown, _grown_realised

    problem = generate_problem(1)
    old = plan_fleet({"a": problem}, solver=_Counting(), cache=False).plans["a"]
    ramp = _scaled(problem, 1.1)
    grown = _grown(ramp, old, 0.15)
    assert grown is not None and redispatch(ramp, grown) is None  # the child falls short
    repaired = _grown_realised(ramp, old, 0.15, None, None)
    assert repaired is not None
    assert sum(g.machines for mp in repaired.modules.values() for g in mp.groups) > sum(
        g.machines for mp in grown.modules.values() for g in mp.groups
    )
    assert check_plan(ramp, repaired) == []
    assert max(p["worst_case_latency_s"] for p in (repaired.model_extra or {})["paths"]) <= ramp.slo_s + 1e-9
    for mp in repaired.modules.values():
        d = (mp.model_extra or {})["dispatch"]
        assert d["spread_rate"] >= d["required_rate"] * (1 - 1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_carried_plan_serves_its_new_problem(seed: int) -> None:
    """Random new price lists, rate and service-time changes: whatever is carried meets the new problem
    (its groups in the profile, the rates carried, realised within the SLO, its bill at the new prices)."""
    import random

    rng = random.Random(seed)
    problems = {f"a{i}": generate_problem(10 * seed + i) for i in range(4)}
    res = plan_fleet(problems, solver=_Counting(), cache=False)
    carried = 0
    for _ in range(6):
        new: dict[str, ProblemSpec] = {}
        factors = {h: rng.uniform(0.5, 1.5) for p in problems.values() for h in sorted(p.hardware)}
        slower = rng.choice([0.0, 0.0, 0.001, 0.003])  # service times (the hop overhead) changed too
        for a, p in problems.items():  # one price list: every app prices a type alike
            hw = {
                h: s.model_copy(update={"price_per_hour": s.price_per_hour * factors[h]})
                for h, s in p.hardware.items()
            }
            new[a] = _slower(_scaled(p.model_copy(update={"hardware": hw}), rng.uniform(0.9, 1.4)), slower)
        out = plan_fleet(new, previous_plans=res.plans, solver=_Counting(), cache=False, solve_budget_s=0.0)
        for a in out.carried:
            plan, problem = out.plans[a], new[a]
            carried += 1
            for m, mp in plan.modules.items():
                profile = {(e.hardware, e.batch, e.concurrency): e for e in problem.modules[m].profile}
                for g in mp.groups:
                    e = profile[(g.hardware, g.batch, g.concurrency)]
                    assert g.duration_s == pytest.approx(
                        e.duration_s
                    ) and g.rate_per_machine <= e.throughput * (1 + 1e-9)
                assert sum(g.machines * g.rate_per_machine for g in mp.groups) >= problem.modules[m].rate * (
                    1 - 1e-9
                )
            paths = (plan.model_extra or {})["paths"]
            assert max(p["worst_case_latency_s"] for p in paths) <= problem.slo_s + 1e-9
            assert plan.billed_per_hour == pytest.approx(_billed(problem, plan))
    assert carried > 0
