"""The dispatch-aware solve's quick mode (``first_found``) and a budgeted epoch with more apps without a
plan than its budget can solve in full: they get quick plans, valid at once, and are solved in full in
later epochs, ending as the epoch without a budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bench.fleet import solved_plans, without_timings
from planner.errors import InfeasibleError
from planner.fleet import CARRIED_KEY, KEEP_KEY, RealisationCache, plan_fleet, realised, redispatch
from planner.fleet.keys import FULL_SOLVE_KEY
from planner.generate import generate_problem
from planner.generate_large import generate_large_problem
from planner.packing import check_fleet
from planner.robust import FIRST_FOUND_KEY, QUICK_SLO, solve_dispatchable
from tests.unit.planner.test_carry import next_epoch
from tests.unit.planner.test_robust import assert_simulated_within

if TYPE_CHECKING:
    from planner.fleet import Schedules
    from planner.models import Plan, ProblemSpec

APPS = 6


class _Quick:
    """The control loop's solver (with its quick mode), counting the quick calls."""

    def __init__(self) -> None:
        self.quick = 0

    def __call__(
        self, problem: ProblemSpec, *, schedules: Schedules | None = None, first_found: bool = False
    ) -> Plan:
        self.quick += first_found
        return solve_dispatchable(problem, schedules=schedules, first_found=first_found)


@pytest.mark.parametrize("seed", range(8))
def test_a_quick_plan_realises_within_the_slo_and_costs_no_less_than_the_full_solve(seed: int) -> None:
    problem = generate_problem(seed)
    full = solve_dispatchable(problem)
    quick = solve_dispatchable(problem, first_found=True)
    assert FIRST_FOUND_KEY not in (full.model_extra or {})
    assert (quick.model_extra or {})[FIRST_FOUND_KEY] is True
    assert realised(quick)
    assert redispatch(problem, quick) is not None  # realised afresh: every path within the SLO
    assert quick.billed_per_hour >= full.billed_per_hour - 1e-9  # the full solve keeps the cheapest
    assert (quick.model_extra or {})["plain_billed_per_hour"] is None  # no plain attempt was made


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 100_000))
def test_a_simulated_quick_plan_stays_within_its_figures_and_the_slo(seed: int) -> None:
    """As the full solve's plans (tests/unit/planner/test_robust.py): simulated under uniform arrivals, no
    window overflows, every module within its realised figure, every frame within the SLO."""
    problem = generate_problem(seed)
    try:
        plan = solve_dispatchable(problem, first_found=True)
    except InfeasibleError:
        assume(False)
    assert_simulated_within(problem, plan)


def test_when_the_quick_start_finds_nothing_the_full_solve_runs() -> None:
    """An SLO so tight that ``QUICK_SLO`` of it has no plan: the quick mode returns the full plan."""
    problem = generate_problem(3)
    with pytest.raises(InfeasibleError) as err:
        solve_dispatchable(problem.model_copy(update={"slo_s": 1e-4}))
    floor = err.value.min_latency_s
    assert floor is not None
    lo, hi = floor, problem.slo_s  # the least SLO (within 1 %) with a realisable plan
    while hi - lo > 0.01 * hi:
        mid = (lo + hi) / 2
        try:
            solve_dispatchable(problem.model_copy(update={"slo_s": mid}))
            hi = mid
        except InfeasibleError:
            lo = mid
    tight = problem.model_copy(update={"slo_s": hi})
    with pytest.raises(InfeasibleError):  # the quick start is infeasible...
        solve_dispatchable(tight.model_copy(update={"slo_s": hi * QUICK_SLO}))
    quick = solve_dispatchable(tight, first_found=True)  # ...so this is the full solve
    assert FIRST_FOUND_KEY not in (quick.model_extra or {})
    full = solve_dispatchable(tight)
    assert without_timings(quick.model_dump(mode="json")) == without_timings(full.model_dump(mode="json"))


@pytest.fixture(scope="module")
def problems() -> dict[str, ProblemSpec]:
    return {f"a{i}": generate_problem(i) for i in range(APPS)}


def test_a_budget_too_small_for_the_new_apps_gives_quick_plans_that_serve(
    problems: dict[str, ProblemSpec],
) -> None:
    solver = _Quick()
    res = plan_fleet(problems, solver=solver, cache=RealisationCache(), solve_budget_s=0.0)
    # the first app is solved in full (no mean yet); past the budget the others are quick
    assert res.quick and res.quick == sorted(res.quick)
    assert "a0" not in res.quick
    assert solver.quick == len(problems) - 1
    assert set(res.quick) <= set(res.carried)
    assert set(res.plans) == set(problems) and not res.failed
    for app in res.quick:
        mark = (res.plans[app].model_extra or {})[CARRIED_KEY]
        assert mark["quick"] is True and mark["sticky"] is False
        assert KEEP_KEY not in (res.plans[app].model_extra or {})  # packed as solved: not shaped
    apps = {a: (problems[a], res.plans[a]) for a in problems}
    assert not check_fleet(res.fleet, apps)  # valid at once, every plan within its SLO


def test_quick_plans_are_solved_in_full_later_and_end_as_the_unbudgeted_epoch(
    problems: dict[str, ProblemSpec],
) -> None:
    cache = RealisationCache()
    first = plan_fleet(problems, solver=_Quick(), cache=cache, solve_budget_s=0.0)
    again = next_epoch(problems, first, cache, 0.0, _Quick())
    assert again.carried == first.carried and not again.resolved  # no budget left: still quick
    later = next_epoch(problems, again, cache, 60.0, _Quick())
    assert later.resolved == first.carried and not later.carried and not later.quick
    unbudgeted = plan_fleet(problems, solver=_Quick(), cache=RealisationCache())
    assert not unbudgeted.quick and not unbudgeted.carried
    assert solved_plans(later.plans) == solved_plans(unbudgeted.plans)
    assert later.fleet.billed_per_hour <= first.fleet.billed_per_hour + 1e-9


def test_a_large_enough_budget_solves_every_new_app_in_full(problems: dict[str, ProblemSpec]) -> None:
    res = plan_fleet(problems, solver=_Quick(), cache=RealisationCache(), solve_budget_s=60.0)
    assert not res.quick and not res.carried


def test_a_solver_without_a_quick_mode_solves_every_new_app_in_full(problems: dict[str, ProblemSpec]) -> None:
    def plain_call(problem: ProblemSpec, *, schedules: Schedules | None = None) -> Plan:
        return solve_dispatchable(problem, schedules=schedules)

    res = plan_fleet(problems, solver=plain_call, cache=RealisationCache(), solve_budget_s=0.0)
    assert not res.quick and not res.carried


def test_the_full_solve_starts_again_from_the_quick_start_when_its_rounds_find_nothing() -> None:
    # 6-module chain (generate_large_problems(2)[1]): the 12 rounds from the plain plan find no
    # realisable plan, the rounds from the quick start do (a full solve used to raise InfeasibleError)
    problem = generate_large_problem(1, modules=6, shape="chain")
    plan = solve_dispatchable(problem)
    assert FIRST_FOUND_KEY not in (plan.model_extra or {})
    assert redispatch(problem, plan) is not None  # realised afresh: every path within the SLO
    assert (plan.model_extra or {})["proven_gap"] is not None


class _NoFullSolve:
    """A solver whose full solve fails after its first ``works`` calls (no realisable plan in its
    rounds); its quick mode works."""

    def __init__(self, works: int = 0) -> None:
        self.works = works

    def __call__(
        self, problem: ProblemSpec, *, schedules: Schedules | None = None, first_found: bool = False
    ) -> Plan:
        if not first_found:
            if self.works <= 0:
                raise InfeasibleError(f"infeasible: no dispatch-realisable plan for {problem.name}")
            self.works -= 1
        return solve_dispatchable(problem, schedules=schedules, first_found=first_found)


def test_a_quick_plan_whose_full_solve_fails_is_kept_and_no_longer_carried(
    problems: dict[str, ProblemSpec],
) -> None:
    # GIVEN quick plans (budget 0: only the first app is solved in full)
    cache = RealisationCache()
    first = plan_fleet(problems, solver=_NoFullSolve(works=1), cache=cache, solve_budget_s=0.0)
    assert first.quick == sorted(set(problems) - {"a0"}) and not first.failed
    # WHEN a later epoch has the budget to solve them in full, and every full solve fails
    later = next_epoch(problems, first, cache, 60.0, _NoFullSolve())
    # THEN each keeps its quick plan as its plan (not carried: the next epochs do not try again)
    assert later.resolved == first.quick and not later.carried
    for app in first.quick:
        extra = later.plans[app].model_extra or {}
        assert CARRIED_KEY not in extra and extra[FULL_SOLVE_KEY].startswith("infeasible")
        assert extra["proven_gap"] is not None
        assert solved_plans({app: later.plans[app]}) == solved_plans({app: first.plans[app]})
    again = next_epoch(problems, later, cache, 60.0, _NoFullSolve())
    assert set(again.reused) >= set(first.quick) and not again.resolved and not again.carried


class _Failing:
    """The control loop's solver, except that every solve of ``app``'s problem fails; counts those."""

    def __init__(self, problem: ProblemSpec) -> None:
        self.problem, self.tries = problem, 0

    def __call__(
        self, problem: ProblemSpec, *, schedules: Schedules | None = None, first_found: bool = False
    ) -> Plan:
        if problem == self.problem:
            self.tries += 1
            raise InfeasibleError("infeasible: no dispatch-realisable plan (test)")
        return solve_dispatchable(problem, schedules=schedules, first_found=first_found)


def test_an_app_that_failed_is_not_solved_again_while_its_problem_is_the_same(
    problems: dict[str, ProblemSpec],
) -> None:
    # GIVEN an app whose solve fails, and quick plans for the others (budget 0)
    cache = RealisationCache()
    solver = _Failing(problems["a1"])
    first = plan_fleet(problems, solver=solver, cache=cache, solve_budget_s=0.0)
    assert set(first.failed) == {"a1"} and solver.tries == 1
    # WHEN the next epochs plan the same problems
    later = next_epoch(problems, first, cache, 60.0, solver)
    # THEN it fails with the same error without a solve, and the budget goes to the carried apps
    assert later.failed == first.failed and solver.tries == 1
    assert later.resolved == first.quick and not later.carried
    # a changed problem is solved again, and so is every app without a budget (nothing is remembered)
    changed = {**problems, "a1": problems["a1"].model_copy(update={"slo_s": problems["a1"].slo_s * 1.01})}
    solver.problem = changed["a1"]
    next_epoch(changed, later, cache, 60.0, solver)
    assert solver.tries == 2
    plan_fleet(changed, solver=solver, cache=cache)
    plan_fleet(changed, solver=solver, cache=cache)
    assert solver.tries == 4
