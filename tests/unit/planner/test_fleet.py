"""plan_fleet and plan shaping: every app planned (failures isolated), shaped plans valid, packed, and
unchanged apps reuse their plans and slots."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner.robust.realisation
from planner.check import check_plan
from planner.dispatch import build_schedule
from planner.fleet import SPLIT_KEY, RealisationCache, plan_fleet, restore_modules, shape_plan
from planner.generate import generate_problem
from planner.packing import check_fleet, simulate_instance
from planner.robust import realise, solve_dispatchable
from planner.solve import solve


def _problems(n: int, seed: int = 0):
    return {f"app{i}": generate_problem(seed * 1000 + i) for i in range(n)}


def _content(fleet):
    return [(i.slot, sorted(s.key for s in i.shares)) for i in fleet.instances]


def test_plans_and_packs_every_app():
    problems = _problems(8)
    res = plan_fleet(problems)
    assert not res.failed
    assert set(res.plans) == set(problems)
    apps = {a: (problems[a], res.plans[a]) for a in problems}
    assert check_fleet(res.fleet, apps) == []
    for a, plan in res.plans.items():
        assert check_plan(problems[a], plan) == [], a
    # never dearer than one instance per machine of the plans as solved
    solved = sum(solve(p).billed_per_hour for p in problems.values())
    assert res.fleet.billed_per_hour <= solved + 1e-6
    assert res.fleet.billed_per_hour >= res.fleet.occupancy_per_hour - 1e-9
    assert res.solve_ms >= 0 and res.pack_ms >= 0 and res.keep in (1.0, 0.0)


def test_infeasible_app_fails_alone():
    problems = _problems(3)
    problems["app1"] = problems["app1"].model_copy(update={"slo_s": 1e-4})
    res = plan_fleet(problems)
    assert set(res.failed) == {"app1"}
    assert "infeasible" in res.failed["app1"] and "\n" not in res.failed["app1"]
    assert set(res.plans) == {"app0", "app2"}
    assert {s.app for i in res.fleet.instances for s in i.shares} == {"app0", "app2"}


def test_unchanged_apps_reuse_previous_plans_and_slots():
    problems = _problems(6)
    first = plan_fleet(problems)
    changed = dict(problems)
    changed["app2"] = problems["app2"].model_copy(update={"slo_s": problems["app2"].slo_s * 1.2})
    second = plan_fleet(changed, previous=first.fleet, previous_plans=first.plans)
    assert sorted(second.reused) == ["app0", "app1", "app3", "app4", "app5"]
    assert check_fleet(second.fleet, {a: (changed[a], second.plans[a]) for a in changed}) == []
    before = dict(_content(first.fleet))
    untouched = [s for s, keys in before.items() if all(k[0] != "app2" for k in keys)]
    after = dict(_content(second.fleet))
    kept = [s for s in untouched if after.get(s) == before[s]]
    assert len(kept) >= 0.9 * len(untouched)


def test_same_problems_same_fleet():
    problems = _problems(5, seed=3)
    a = plan_fleet(problems)
    b = plan_fleet(problems, previous=a.fleet, previous_plans=a.plans)
    assert len(b.reused) == 5
    assert _content(a.fleet) == _content(b.fleet)


def test_tighten_plans_for_a_shorter_slo_and_solver_is_injectable():
    problems = _problems(3)
    seen = []

    def solver(p):
        seen.append(p.slo_s)
        return solve(p)

    res = plan_fleet(problems, tighten=0.1, solver=solver)
    assert sorted(seen) == pytest.approx(sorted(p.slo_s * 0.9 for p in problems.values()))
    assert check_fleet(res.fleet, {a: (problems[a], res.plans[a]) for a in problems}) == []
    with pytest.raises(ValueError, match="tighten"):
        plan_fleet(problems, tighten=1.0)


def test_baseline_policies_are_packed_as_planned():
    problems = _problems(4)
    res = plan_fleet(problems, policy="nexus")
    assert all(len(i.shares) == 1 for i in res.fleet.instances)
    assert res.fleet.billed_per_hour == pytest.approx(sum(p.billed_per_hour for p in res.plans.values()))


@given(st.integers(0, 10_000), st.sampled_from([1.0, 0.5, 0.25, 0.0]))
@settings(max_examples=40, deadline=None)
def test_shaped_plans_are_valid_and_restorable(seed, keep):
    problem = generate_problem(seed)
    plan = solve(problem)
    shaped = shape_plan(problem, plan, keep=keep)
    assert check_plan(problem, shaped) == []
    for path in problem.paths():
        assert sum(shaped.modules[m].worst_case_latency_s for m in path) <= problem.slo_s + 1e-9
    for mp in shaped.modules.values():
        if SPLIT_KEY in mp.model_extra:
            full, res = mp.groups
            # d + 2 b / W with W the planned rate: the dispatch's guarantee for two groups
            assert (
                mp.worst_case_latency_s
                >= full.duration_s
                + 2 * full.batch / (full.machines * full.rate_per_machine + res.rate_per_machine)
                - 1e-9
            )
    # reshaping a shaped plan starts from the solver's plan again; restoring gives it back
    assert shape_plan(problem, shaped, keep=keep).modules == shaped.modules
    restored = restore_modules(problem, shaped, set(problem.modules))
    assert restored.modules == plan.modules
    assert restored.billed_per_hour == pytest.approx(plan.billed_per_hour)


def test_shape_rejects_bad_keep():
    p = generate_problem(1)
    with pytest.raises(ValueError, match="keep"):
        shape_plan(p, solve(p), keep=1.5)


def _scaled(problem, factor):
    mods = {m: s.model_copy(update={"rate": s.rate * factor}) for m, s in problem.modules.items()}
    return problem.model_copy(update={"modules": mods})


def test_rate_changes_within_the_plan_keep_the_plan():
    problems = _problems(6, seed=2)
    first = plan_fleet(problems)
    # every app's rates up 1 %: apps whose planned rates (dummy included) still cover them keep their
    # plans (and their slots); the others are planned again
    up = {a: _scaled(p, 1.01) for a, p in problems.items()}
    second = plan_fleet(up, previous=first.fleet, previous_plans=first.plans)
    assert second.reused, "billed plans run full machines: 1 % more load fits somewhere"
    for a in second.reused:
        assert {m: [g.model_dump() for g in mp.groups] for m, mp in second.plans[a].modules.items()} == {
            m: [g.model_dump() for g in mp.groups] for m, mp in first.plans[a].modules.items()
        }
    for a, plan in second.plans.items():
        assert check_plan(up[a], plan) == [], a
        assert plan.model_extra["problem_digest"] != first.plans[a].model_extra["problem_digest"]
    assert check_fleet(second.fleet, {a: (up[a], second.plans[a]) for a in up}) == []
    # a 30 % drop is beyond hold = 0.15: every app is planned again
    down = {a: _scaled(p, 0.7) for a, p in problems.items()}
    third = plan_fleet(down, previous=first.fleet, previous_plans=first.plans)
    assert third.reused == []
    # hold = 0 turns rate-changed reuse off
    assert plan_fleet(up, previous=first.fleet, previous_plans=first.plans, hold=0).reused == []


def test_rates_beyond_the_plan_grow_it_when_that_is_cheap_enough():
    problems = _problems(6, seed=5)
    first = plan_fleet(problems)
    up = {a: _scaled(p, 1.4) for a, p in problems.items()}
    # stick = 1: the previous plan grown by whole machines wins whenever it bills <= 2x a fresh plan
    grown = plan_fleet(up, previous=first.fleet, previous_plans=first.plans, stick=1.0)
    fresh = plan_fleet(up, previous=first.fleet, previous_plans=first.plans, stick=0.0)
    replanned = [a for a in up if a not in grown.reused]
    assert replanned, "40 % more load exceeds some plan"
    for a in replanned:
        plan = grown.plans[a]
        assert plan.model_extra.get("grown") is True
        assert check_plan(up[a], plan) == [], a
        before = {
            m: {(g.hardware, g.batch, g.concurrency) for g in mp.groups}
            for m, mp in first.plans[a].modules.items()
        }
        after = {
            m: {(g.hardware, g.batch, g.concurrency) for g in mp.groups} for m, mp in plan.modules.items()
        }
        assert after == before  # the same configurations, more machines
        assert "grown" not in fresh.plans[a].model_extra
    assert check_fleet(grown.fleet, {a: (up[a], grown.plans[a]) for a in up}) == []
    with pytest.raises(ValueError, match="stick"):
        plan_fleet(up, stick=-0.1)


def _dispatchable(problem, *, schedules=None):
    return solve_dispatchable(problem, schedules=schedules)


def _configs(plan):
    from planner.fleet.keys import solved_modules

    return {
        m: {(g.hardware, g.batch, g.concurrency) for g in mp.groups} for m, mp in solved_modules(plan).items()
    }


def test_a_replan_keeps_its_configurations_when_that_bills_within_stick():
    """25 % more load on generated app 10: the fresh plan moves work to other configurations; the plan
    solved with each module kept to its previous configurations bills 2.0 % more, within stick (3 %),
    so the machines grow where they are and nothing changes hardware. With stick 0 the fresh plan wins."""
    problem = generate_problem(10)
    first = plan_fleet({"a": problem}, solver=_dispatchable, cache=RealisationCache())
    up = {"a": _scaled(problem, 1.25)}
    kept = plan_fleet(up, previous=first.fleet, previous_plans=first.plans, solver=_dispatchable, cache=False)
    fresh = plan_fleet(up, solver=_dispatchable, cache=False)
    plan = kept.plans["a"]
    assert plan.model_extra.get("kept_configurations") is True and "grown" not in plan.model_extra
    assert _configs(fresh.plans["a"]) != _configs(first.plans["a"])  # the premise: the optimum moves
    for m, used in _configs(plan).items():
        assert used <= _configs(first.plans["a"])[m], m
    assert fresh.plans["a"].billed_per_hour < plan.billed_per_hour <= fresh.plans["a"].billed_per_hour * 1.03
    assert check_plan(up["a"], plan) == []
    _dispatch_figures_are_current(up["a"], plan)
    assert check_fleet(kept.fleet, {"a": (up["a"], plan)}) == []
    never = plan_fleet(up, previous=first.fleet, previous_plans=first.plans, solver=_dispatchable, stick=0.0)
    assert "kept_configurations" not in never.plans["a"].model_extra


def _dispatch_figures_are_current(problem, plan):
    """Every module's recorded dispatch figures are what realise() gives for its groups now."""
    real = realise(problem, plan)
    prices = {h: x.price_per_hour for h, x in problem.hardware.items()}
    for m, mp in plan.modules.items():
        info = mp.model_extra["dispatch"]
        assert info["spread_rate"] == pytest.approx(real[m].spread_rate, rel=1e-9), m
        assert info["period_s"] == pytest.approx(build_schedule(m, mp, prices).period_s, rel=1e-12), m
        assert mp.worst_case_latency_s == pytest.approx(real[m].worst_case_s, rel=1e-9), m
        assert real[m].collision_free or not real[m].guaranteed, m
    for path in problem.paths():
        assert sum(real[m].worst_case_s for m in path) <= problem.slo_s + 1e-9


@pytest.mark.parametrize("seed", [3, 11, 24])
def test_shaping_a_realised_plan_refreshes_its_dispatch_figures(seed):
    # GIVEN a dispatch-aware plan (it records spread rates, periods and realised worst cases)
    problem = generate_problem(seed)
    plan = solve_dispatchable(problem)
    for keep in (0.5, 0.0):
        # WHEN shaping changes collection times and splits
        shaped = shape_plan(problem, plan, keep=keep)
        # THEN the shaped plan's dispatch figures are recomputed for its new groups (or it is the plan as
        # solved, when the realised shaped plan would miss the SLO)
        assert check_plan(problem, shaped) == []
        _dispatch_figures_are_current(problem, shaped)
        assert shaped.model_extra["dispatch_realised"] is True
    # a plain plan gets no dispatch figures from shaping
    assert (
        "dispatch"
        not in shape_plan(problem, solve(problem), keep=0.0).modules[problem.order()[0]].model_extra
    )


def test_plan_fleet_with_a_dispatch_aware_solver_keeps_figures_current():
    problems = _problems(6, seed=1)
    res = plan_fleet(problems, solver=solve_dispatchable)
    apps = {a: (problems[a], res.plans[a]) for a in problems}
    assert check_fleet(res.fleet, apps) == []
    for a, plan in res.plans.items():
        assert check_plan(problems[a], plan) == [], a
        _dispatch_figures_are_current(problems[a], plan)


def test_plan_fleet_aligns_one_machine_modules_and_records_their_phases():
    problems = _problems(20, seed=4)
    res = plan_fleet(problems)
    fifo = plan_fleet(problems, align=False)
    apps = {a: (problems[a], res.plans[a]) for a in problems}
    assert check_fleet(res.fleet, apps) == []
    assert not any(i.aligned for i in fifo.fleet.instances)
    aligned = [i for i in res.fleet.instances if i.aligned]
    assert aligned
    for inst in aligned:
        for s in inst.shares:
            extra = res.plans[s.app].modules[s.module].model_extra
            assert extra["schedule_phase_s"] == s.phase_s and extra["duty_cycle_s"] == inst.cycle_s
        assert all(r.max_wait_s < 1e-9 for r in simulate_instance(inst, apps, periods=20))
    for a, plan in res.plans.items():
        assert check_plan(problems[a], plan) == [], a
    # the same problems again reuse every plan and keep the fleet
    again = plan_fleet(problems, previous=res.fleet, previous_plans=res.plans)
    assert len(again.reused) == len(problems)
    assert _content(again.fleet) == _content(res.fleet)
    assert check_fleet(again.fleet, {a: (problems[a], again.plans[a]) for a in problems}) == []


class _Solved:
    """solve_dispatchable once per distinct problem (copies: plan_fleet writes its digests into a plan)."""

    def __init__(self):
        self.plans = {}

    def __call__(self, problem):
        key = problem.model_dump_json()
        if key not in self.plans:
            self.plans[key] = solve_dispatchable(problem)
        return self.plans[key].model_copy(deep=True)


def _dump(res):
    return (
        {a: p.model_dump_json() for a, p in sorted(res.plans.items())},
        res.fleet.model_dump_json(),
        res.keep,
        sorted(res.reused),
        res.failed,
    )


def _rates(problems, factor):
    return {
        a: p.model_copy(
            update={
                "modules": {m: s.model_copy(update={"rate": s.rate * factor}) for m, s in p.modules.items()}
            }
        )
        for a, p in problems.items()
    }


@pytest.mark.parametrize("seed", [2, 7])
def test_realisation_cache_changes_nothing_but_time(seed):
    # GIVEN dispatch-aware plans (one solve per problem, so both runs see the same solver output)
    problems = _problems(4, seed=seed)
    solver = _Solved()
    cache = RealisationCache()
    # WHEN three epochs (cold, all reused, rates up 3 % so plans are held or grown) run with a cache that
    # carries over between epochs, and again with no cache at all
    runs = {}
    for name, memo in (("cached", cache), ("none", False)):
        cold = plan_fleet(problems, solver=solver, cache=memo)
        same = plan_fleet(problems, previous=cold.fleet, previous_plans=cold.plans, solver=solver, cache=memo)
        up = _rates(problems, 1.03)
        moved = plan_fleet(up, previous=same.fleet, previous_plans=same.plans, solver=solver, cache=memo)
        runs[name] = [_dump(cold), _dump(same), _dump(moved)]
    # THEN the plans, fleets, keeps and reuse are identical
    assert runs["cached"] == runs["none"]
    assert len(cache) > 0


def _untimed(res):
    """``_dump`` with the solver's timings left out (plans solved twice differ only in those)."""
    plans = {a: p.model_copy(update={"solve_ms": 0.0, "solve_cpu_ms": 0.0}) for a, p in res.plans.items()}
    return _dump(dataclasses.replace(res, plans=plans))


@pytest.mark.parametrize("seed", [1, 2, 3, 7])
def test_shared_schedules_change_nothing_but_time(seed, monkeypatch):
    # GIVEN a solver that takes plan_fleet's per-app schedule dict, and one that builds its own
    built = []
    real_build = planner.robust.realisation.build_schedule

    def counted(*args, **kwargs):
        built.append(args[0])
        return real_build(*args, **kwargs)

    monkeypatch.setattr(planner.robust.realisation, "build_schedule", counted)
    given = []

    def sharing(problem, *, schedules=None):
        given.append(schedules)
        return solve_dispatchable(problem, schedules=schedules)

    def own(problem):
        return solve_dispatchable(problem)

    problems = _problems(4, seed=seed)
    up = _rates(problems, 1.03)
    # WHEN a cold epoch and one with rates up 3 % (plans held or grown, realised at the new rates) run
    # with each, a fresh realisation cache per run
    runs, builds = {}, {}
    for name, solver in (("sharing", sharing), ("own", own)):
        memo = RealisationCache()
        start = len(built)
        cold = plan_fleet(problems, solver=solver, cache=memo)
        moved = plan_fleet(up, previous=cold.fleet, previous_plans=cold.plans, solver=solver, cache=memo)
        runs[name], builds[name] = [_untimed(cold), _untimed(moved)], len(built) - start
    # THEN the plans, fleets, keeps and reuse are identical, and sharing built fewer schedules
    assert runs["sharing"] == runs["own"]
    assert given and all(isinstance(d, dict) for d in given)
    assert builds["sharing"] < builds["own"]
    # without a realisation cache nothing is shared (every shape realised afresh)
    given.clear()
    plan_fleet(problems, solver=sharing, cache=False)
    assert given == [None] * len(given) and given


def test_realisation_cache_keeps_only_what_the_last_epoch_used():
    solver = _Solved()
    first, other = _problems(3, seed=5), _problems(2, seed=6)
    alone = RealisationCache()
    plan_fleet(other, solver=solver, cache=alone)
    cache = RealisationCache()
    plan_fleet(first, solver=solver, cache=cache)
    assert len(cache) > 0
    # an epoch of other apps uses none of it: at its end only its own realisations are left
    plan_fleet(other, solver=solver, cache=cache)
    assert len(cache) == len(alone)


def test_held_and_grown_realised_plans_are_realised_at_the_new_rates():
    # GIVEN an epoch of dispatch-aware plans
    problems = _problems(4, seed=1)
    solver = _Solved()
    first = plan_fleet(problems, solver=solver)
    # WHEN every rate rises a little (plans held or grown, not solved again) or a lot
    for factor in (1.02, 1.3):
        up = _rates(problems, factor)
        res = plan_fleet(up, previous=first.fleet, previous_plans=first.plans, solver=solver)
        assert res.reused or factor > 1.1  # a small rise holds (or grows) the previous plans
        # THEN every plan's dispatch figures (bursts, spread rates, worst cases) are those of the new rates
        for a, plan in res.plans.items():
            assert check_plan(up[a], plan) == [], a
            _dispatch_figures_are_current(up[a], plan)
        assert check_fleet(res.fleet, {a: (up[a], res.plans[a]) for a in up}) == []
    assert set(res.reused) <= set(problems)
