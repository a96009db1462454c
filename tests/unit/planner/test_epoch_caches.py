"""What makes a cold epoch cheaper must never change a result: the billed-optimum cache shared by the
rounds of the dispatch-aware solve, the schedule's lazily built lookup tables and memo, the plain-Python
layout of one-group schedules, the packer's closed bins, and the garbage-collector thresholds an epoch
runs with."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import numpy as np
import pytest

import planner.robust.search
import planner.robust.spread
from planner.dispatch import DispatchSchedule, build_schedule
from planner.dispatch.build import _Layout
from planner.dispatch.order import SequencedGroup, order_edf
from planner.errors import PlannerError
from planner.fleet import EPOCH_GC_THRESHOLDS, RealisationCache, plan_fleet, seed_plan
from planner.generate import generate_problem
from planner.models import MachineGroup, ModulePlan, Plan
from planner.packing import Share
from planner.packing.binpack import _best_fit, _Bin, _Item, _Slots
from planner.robust import solve_dispatchable
from planner.solve import BilledCache, solve

if TYPE_CHECKING:
    from planner.fleet import Schedules
    from planner.models import ProblemSpec

SEEDS = (0, 3, 7)


def _dump(plan: object) -> dict[str, object]:
    out = plan.model_dump(mode="json")  # type: ignore[attr-defined]
    out.pop("solve_ms", None)
    out.pop("solve_cpu_ms", None)
    return out  # type: ignore[no-any-return]


@pytest.mark.parametrize("seed", SEEDS)
def test_solve_with_a_billed_cache_is_the_solve_without(seed: int) -> None:
    problem = generate_problem(seed)
    cache = BilledCache()
    first = solve(problem, cache=cache)
    assert cache.misses > 0
    again = solve(problem, cache=cache)
    assert cache.hits > 0  # the second solve asks the same questions
    plain = solve(problem)
    assert _dump(first) == _dump(plain) == _dump(again)


def test_billed_cache_is_keyed_on_prices_and_rates() -> None:
    """A cache filled for one price list and rate must not answer for another (no stale optimum)."""
    problem = generate_problem(1)
    cache = BilledCache()
    solve(problem, cache=cache)
    hw = {
        h: spec.model_copy(update={"price_per_hour": spec.price_per_hour * (1.5 if i % 2 else 0.6)})
        for i, (h, spec) in enumerate(problem.hardware.items())
    }
    repriced = problem.model_copy(update={"hardware": hw})
    root = problem.order()[0]
    mods = dict(problem.modules)
    mods[root] = mods[root].model_copy(update={"rate": mods[root].rate * 1.37})
    rerated = problem.model_copy(update={"modules": mods})
    for variant in (repriced, rerated):
        assert _dump(solve(variant, cache=cache)) == _dump(solve(variant))


@pytest.mark.parametrize("seed", SEEDS)
def test_billed_cache_spans_answer_other_budgets_like_a_fresh_search(seed: int) -> None:
    """A proven optimum for budget L with worst case l answers budgets in [l, L]: solves of the same
    problem at other SLOs (what the dispatch-aware rounds do) get the plans a fresh solve gets."""
    problem = generate_problem(seed)
    cache = BilledCache()
    for factor in (1.0, 0.97, 0.9, 1.05, 0.8):
        variant = problem.model_copy(update={"slo_s": problem.slo_s * factor})
        try:
            fresh = _dump(solve(variant))
        except PlannerError:
            continue
        assert _dump(solve(variant, cache=cache)) == fresh
    assert cache.hits > 0


def test_billed_cache_stays_within_its_bound() -> None:
    cache = BilledCache(max_entries=5)
    for seed in SEEDS:
        solve(generate_problem(seed), cache=cache)
        assert len(cache) <= 5
    assert _dump(solve(generate_problem(0), cache=cache)) == _dump(solve(generate_problem(0)))
    with pytest.raises(ValueError, match="max_entries"):
        BilledCache(max_entries=0)


def test_dispatchable_solve_unchanged_by_its_round_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """solve_dispatchable shares one BilledCache across its rounds; without it (every round searching
    afresh) the plan is the same."""
    problem = generate_problem(4)
    cached = solve_dispatchable(problem)

    class _NoCache(BilledCache):
        def put(self, table: object, rate: float, budget: float, value: object) -> None:  # type: ignore[override]
            """Keep nothing: every lookup misses."""

    monkeypatch.setattr(planner.robust.search, "BilledCache", _NoCache)
    fresh = solve_dispatchable(problem)
    assert _dump(cached) == _dump(fresh)


def _schedule() -> DispatchSchedule:
    mp = ModulePlan(
        latency_budget_s=1.0,
        worst_case_latency_s=1.0,
        groups=[
            MachineGroup(
                hardware="gpu", batch=4, concurrency=1, duration_s=0.1, machines=2, rate_per_machine=40
            ),
            MachineGroup(
                hardware="gpu", batch=2, concurrency=1, duration_s=0.07, machines=1, rate_per_machine=25
            ),
        ],
    )
    return build_schedule("m", mp)


def test_schedule_lookups_are_derived_data() -> None:
    a, b = _schedule(), _schedule()
    a.slot_at(0.3)
    a.window_arrays()
    assert a == b  # a built lookup table never makes two schedules unequal
    start, end, wait, dur, batch = a.window_arrays()
    assert start.tolist() == [w.start_s for w in a.windows]
    assert end.tolist() == [w.end_s for w in a.windows]
    assert wait.tolist() == [w.wait_s for w in a.windows]
    assert dur.tolist() == [a.groups[w.group].duration_s for w in a.windows]
    assert batch.tolist() == [float(a.groups[w.group].batch) for w in a.windows]
    assert a.window_groups() == sorted({w.group for w in a.windows})
    with pytest.raises(ValueError):
        start[0] = 1.0  # the cached arrays are read-only
    again = DispatchSchedule.model_validate_json(a.model_dump_json())
    assert again == a and again.slot_at(0.3) == a.slot_at(0.3)


def test_schedule_lookups_follow_replaced_windows() -> None:
    a = _schedule()
    t = a.windows[1].start_s
    assert a.slot_at(t).batch_id == 1
    shifted = [w.model_copy(update={"start_s": w.start_s / 2, "end_s": w.end_s / 2}) for w in a.windows]
    b = a.model_copy(update={"windows": shifted})  # shares a's private state
    assert b.slot_at(t / 2).batch_id == 1
    assert b.window_arrays()[0][1] == pytest.approx(t / 2)
    assert a.slot_at(t).batch_id == 1 and a.window_arrays()[0][1] == t


def test_plan_fleet_restores_the_collector_thresholds() -> None:
    before = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []

    def solver(problem):  # type: ignore[no-untyped-def]
        seen.append(gc.get_threshold())
        return solve(problem)

    res = plan_fleet({"a": generate_problem(2)}, solver=solver, cache=RealisationCache())
    assert res.plans and seen
    assert all(t >= e for t, e in zip(seen[0], EPOCH_GC_THRESHOLDS, strict=True))
    assert gc.get_threshold() == before
    with pytest.raises(ValueError):
        plan_fleet({"a": generate_problem(2)}, tighten=2.0)
    assert gc.get_threshold() == before
    assert np.isfinite(res.fleet.billed_per_hour)


# --------------------------------------------------------------------------- cold-epoch shortcuts


@pytest.mark.parametrize("machines", [1, 2, 3])
@pytest.mark.parametrize("conc", [1, 2, 3])
@pytest.mark.parametrize("fill", [1.0, 0.73, 1 / 3, 0.05])
def test_one_group_layout_is_the_numpy_layout_bit_for_bit(machines: int, conc: int, fill: float) -> None:
    """The plain-Python layout of a one-group schedule gives the floats the numpy one gives."""
    rng = np.random.default_rng(machines * 100 + conc * 10 + int(fill * 7))
    for _ in range(20):
        dur = float(rng.uniform(0.005, 0.4))
        count = int(rng.integers(1, 9))
        window = float(rng.uniform(0.5, 1.5)) * dur / fill / conc
        g = SequencedGroup(0, machines=machines, count=count, window=window, dur=dur, conc=conc, slack=0.01)
        period = window * g.total * float(rng.uniform(0.999, 1.001))
        fast, ref = _Layout.one_group(g, period), _Layout(order_edf([g], period), [g], period)
        for name in ("seq", "ends", "starts", "machine", "waits"):
            a, b = getattr(fast, name), getattr(ref, name)
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
        assert (fast.group_wcl, fast.group_windows, fast.worst, fast.score) == (
            ref.group_wcl,
            ref.group_windows,
            ref.worst,
            ref.score,
        )


def test_one_group_layout_with_queueing() -> None:
    """A machine loaded past one batch per window queues: the fast layout has the numpy waits."""
    g = SequencedGroup(0, machines=2, count=5, window=0.01, dur=0.05, conc=2, slack=0.0)
    fast, ref = _Layout.one_group(g, 0.1), _Layout(order_edf([g], 0.1), [g], 0.1)
    assert ref.waits.max() > 0
    assert fast.waits.tobytes() == ref.waits.tobytes() and fast.worst == ref.worst


def test_required_spread_rate_is_kept_per_schedule_and_input() -> None:
    sched = _schedule()
    first = planner.robust.spread.required_spread_rate(sched, 1.5, [30.0, 12.0])
    assert first == planner.robust.spread._required_spread_rate(sched, 1.5, (30.0, 12.0))
    memo = sched.derived()
    assert ("spread", sched.period_s, 1.5, (30.0, 12.0), True) in memo
    assert planner.robust.spread.required_spread_rate(sched, 1.5, (30.0, 12.0)) == first  # a list or a tuple
    assert planner.robust.spread.required_spread_rate(
        sched, 1.5, 30.0
    ) == planner.robust.spread._required_spread_rate(sched, 1.5, (30.0,))
    # a root's stream (not spaced) is another question, kept apart
    unspaced = planner.robust.spread.required_spread_rate(sched, 1.5, 30.0, spaced=False)
    assert unspaced == planner.robust.spread._required_spread_rate(sched, 1.5, (30.0,), False)
    assert ("spread", sched.period_s, 1.5, (30.0,), False) in memo
    # other windows: the memo is emptied (a model_copy shares the private state)
    shifted = [w.model_copy(update={"end_s": w.end_s * 0.9}) for w in sched.windows]
    other = sched.model_copy(update={"windows": shifted})
    assert other.derived() == {}
    assert planner.robust.spread.required_spread_rate(other, 1.5, [30.0, 12.0]) == (
        planner.robust.spread._required_spread_rate(other, 1.5, (30.0, 12.0))
    )


def _best_fit_every_bin(items: list[_Item], bins: list[_Bin]) -> None:
    """The best fit before closed bins left the candidates: every bin of the hardware is tried."""
    for it in sorted(items, key=lambda i: (-i.share.busy, -i.share.duration_s, i.order)):
        best = None
        if it.flexible:
            for b in bins:
                if b.hw == it.hw and b.items[0].flexible and b.fits(it):
                    if best is None or b.fill(it) > best.fill(it):
                        best = b
        if best is None:
            best = _Bin(it.hw)
            bins.append(best)
        best.add(it)


@pytest.mark.parametrize("seed", range(8))
def test_best_fit_without_closed_bins_places_every_item_where_a_full_scan_does(seed: int) -> None:
    rng = np.random.default_rng(seed)
    items = []
    for k in range(300):
        busy = float(rng.choice([rng.uniform(0.02, 0.3), rng.uniform(0.3, 1.0)]))
        dur = float(rng.uniform(0.01, 0.2))
        share = Share(
            app=f"a{k}",
            module="m",
            group=0,
            machine=0,
            hardware=str(rng.choice(["t4", "cpu"])),
            batch=1,
            concurrency=1,
            duration_s=dur,
            rate=busy / dur,
            occupancy=busy,
            busy=busy,
        )
        items.append(_Item(share, bool(rng.random() < 0.85), float(rng.uniform(0.0, 0.5)), k))
    fast: list[_Bin] = []
    _best_fit(items, fast)
    ref: list[_Bin] = []
    _best_fit_every_bin(items, ref)
    assert [[i.order for i in b.items] for b in fast] == [[i.order for i in b.items] for b in ref]
    assert sum(len(b.items) > 1 for b in fast) > 5  # the test packs something


def test_new_slot_names_fill_the_gaps_first() -> None:
    names = _Slots(["t4/0", "t4/2", "t4/5", "cpu/x"])
    assert [names.new("t4") for _ in range(4)] == ["t4/1", "t4/3", "t4/4", "t4/6"]
    assert names.new("cpu") == "cpu/0"


def _sharing_solver(problem: ProblemSpec, *, schedules: Schedules | None = None) -> Plan:
    return solve_dispatchable(problem, schedules=schedules)


def test_an_epoch_with_registration_seeds_is_the_epoch_that_solves() -> None:
    """A seed (the plan a registration solved, stored as JSON) replaces the epoch's solve of the same
    problem: every plan and the fleet come out as if the epoch had solved (timings aside)."""
    problems = {f"a{i}": generate_problem(i) for i in range(6)}
    seeds = {
        a: Plan.model_validate_json(seed_plan(p, solve_dispatchable(p), "skinflint").model_dump_json())
        for a, p in problems.items()
    }
    seeded = plan_fleet(problems, seeds=seeds, solver=_sharing_solver, cache=RealisationCache())
    solved = plan_fleet(problems, solver=_sharing_solver, cache=RealisationCache())
    assert seeded.seeded == sorted(problems) and solved.seeded == []
    assert {a: _dump(p) for a, p in seeded.plans.items()} == {a: _dump(p) for a, p in solved.plans.items()}
    assert seeded.fleet == solved.fleet


def test_a_seed_for_another_problem_is_not_taken() -> None:
    """A seed solved at another rate (or for another policy) is ignored: the app is solved."""
    problem = generate_problem(2)
    faster = problem.model_copy(
        update={
            "modules": {m: s.model_copy(update={"rate": s.rate * 1.5}) for m, s in problem.modules.items()}
        }
    )
    stale = seed_plan(faster, solve_dispatchable(faster), "skinflint")
    other_policy = seed_plan(problem, solve_dispatchable(problem), "nexus")
    for seed in (stale, other_policy):
        out = plan_fleet({"a": problem}, seeds={"a": seed}, solver=_sharing_solver, cache=RealisationCache())
        assert out.seeded == []
        ref = plan_fleet({"a": problem}, solver=_sharing_solver, cache=RealisationCache())
        assert _dump(out.plans["a"]) == _dump(ref.plans["a"])
