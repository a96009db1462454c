"""The realisation path's fast paths give what the plain code gives, bit for bit: the required spread rate
in plain Python floats against its numpy evaluation, the unrolled two-group step of the eligibility pass
against the general step (kept here as the reference), the period search of one group and of a few
groups against the evaluation through ``_counts``, a schedule's window lists and groups against its
arrays, and a problem's cached :func:`planner.split.topology` against :class:`ProblemSpec`'s methods."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from planner.dispatch import DispatchSchedule, build_schedule
from planner.dispatch import build as dispatch_build
from planner.dispatch import order as dispatch_order
from planner.dispatch import period as dispatch_period
from planner.generate import generate_problem
from planner.latency import EPS
from planner.models import MachineGroup, ModulePlan
from planner.robust import spread as robust_spread
from planner.split import topology
from tests.unit.planner.test_dispatch import exhaustive_period

PRICES = {"h1": 1.0, "h2": 0.6}


def random_plan(rng: random.Random, max_groups: int = 3) -> ModulePlan:
    """A module plan of 1-``max_groups`` configurations: full or partial machines, profiled-looking
    durations (microseconds), concurrency up to 3."""
    groups = []
    for _ in range(rng.randint(1, max_groups)):
        b, c = rng.choice([1, 2, 3, 4, 8, 16]), rng.choice([1, 1, 2, 3])
        d = round(rng.uniform(0.002, 0.2), 6)
        load = rng.choice([1.0, 1.0, rng.uniform(0.05, 1.0)])
        groups.append(
            MachineGroup(
                hardware=rng.choice(["h1", "h2"]),
                batch=b,
                concurrency=c,
                duration_s=d,
                machines=rng.choice([1, 1, 2, 3, 5]),
                rate_per_machine=c * b / d * load,
            )
        )
    return ModulePlan(latency_budget_s=1.0, worst_case_latency_s=1.0, groups=groups)


def schedules(seed: int, n: int, max_groups: int = 3) -> list[DispatchSchedule]:
    rng = random.Random(seed)
    return [build_schedule("m", random_plan(rng, max_groups), PRICES) for _ in range(n)]


# --------------------------------------------------------------------------- required spread rate


@pytest.mark.parametrize("seed", range(4))
def test_required_spread_rate_in_python_is_numpys_bit_for_bit(seed):
    rng = random.Random(100 + seed)
    checked = 0
    for sched in schedules(seed, 150):
        if len(sched.windows) > 400:
            continue
        for _ in range(3):
            per_request = rng.choice([0.1, 0.5, 1.0, 2.5, 3.0, rng.uniform(0.01, 6.0)])
            streams = tuple(
                rng.choice([sched.planned_rate, rng.uniform(1.0, 2.0 * sched.planned_rate)])
                for _ in range(rng.choice([1, 1, 2, 3]))
            )
            fast = robust_spread._required_spread_rate_small(sched, per_request, streams)
            slow = robust_spread._required_spread_rate(sched, per_request, streams)
            # repr: the same floats bit for bit (inf included), the same burst
            assert repr(fast) == repr(slow), (sched.model_dump_json()[:300], per_request, streams)
            assert type(fast[0]) is float and type(fast[1]) is int
            checked += 1
    assert checked > 200


def test_required_spread_rate_of_an_idle_parent_is_zero_on_both_paths():
    sched = schedules(0, 1, max_groups=1)[0]
    # a stream this sparse puts no request in a window: no child, no requirement
    assert robust_spread._required_spread_rate_small(sched, 1.0, (1e-12,)) == (0.0, 0)
    assert robust_spread._required_spread_rate(sched, 1.0, (1e-12,)) == (0.0, 0)


def test_required_spread_rate_takes_numpy_for_long_periods_and_odd_inputs(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(robust_spread, "_required_spread_rate", lambda *a: calls.append("numpy") or (1.0, 1))
    monkeypatch.setattr(
        robust_spread, "_required_spread_rate_small", lambda *a: calls.append("python") or (1.0, 1)
    )
    short = schedules(1, 1, max_groups=1)[0]
    assert len(short.windows) <= robust_spread._SMALL_PATTERN
    robust_spread.required_spread_rate(short, 1.0, 10.0)
    robust_spread.required_spread_rate(short, 1.0, math.inf)  # not a float the plain path handles
    assert calls == ["python", "numpy"]


# --------------------------------------------------------------------------- schedule tables


def test_window_lists_and_groups_are_the_arrays():
    for sched in schedules(5, 60):
        start, end, wait, dur, batch = sched.window_arrays()
        lists = sched.window_lists()
        for arr, lst in zip((start, end, wait, dur, batch), lists, strict=True):
            assert lst == arr.tolist()
            assert all(type(x) is float for x in lst)
        assert sched.window_groups() == np.unique(sched.windows.group).tolist()


# --------------------------------------------------------------------------- period search


def reference_period(lam, cap, machines, batch):
    """:func:`planner.dispatch.period.choose_period` evaluated through ``_counts`` (its code before the one- and
    few-group loops were fused)."""
    return exhaustive_period(lam, cap, machines, batch, early_stop=True)


@pytest.mark.parametrize("groups", [1, 2, 3, 7])
def test_fused_period_search_is_the_counts_evaluation(groups):
    rng = random.Random(groups)
    for _ in range(300):
        lam, cap, machines, batch = [], [], [], []
        for _ in range(groups):
            c, d = rng.choice([1, 2, 3]), rng.choice([0.01, 0.025, 0.125, round(rng.uniform(0.003, 0.5), 6)])
            lam.append(c / d * rng.choice([1.0, 1.0, 0.5, rng.uniform(0.05, 1.0)]))
            cap.append(c / d)
            machines.append(rng.choice([1, 2, 3, 40, 600]))
            batch.append(rng.choice([1, 2, 4, 8, 32]))
        got = dispatch_period.choose_period(lam, cap, machines, batch)
        want = reference_period(lam, cap, machines, batch)
        assert repr(got) == repr(want), (lam, cap, machines, batch)


# --------------------------------------------------------------------------- eligibility pass


def reference_pass(groups, period, dls, last):
    """The eligibility pass with the general step only (no unrolled two-group step)."""
    cur = dispatch_order._Pass(len(groups))
    windows = [g.window for g in groups]
    lags = [g.lag for g in groups]
    need = [min(g.lag, g.total) for g in groups]
    prev = last.ends if last is not None else [[] for _ in groups]
    order = [p for p, g in enumerate(groups) if g.total > 0]
    base = [dispatch_order._ready(g, 0, [], prev[p], period) - g.slack for p, g in enumerate(groups)]
    deadline = [d[0] if d else 0.0 for d in dls]
    pending = sum(1 for n in need if n > 0)
    tau = 0.0
    for step in range(sum(g.total for g in groups)):
        best, late, best_excess, best_dl = -1, True, 0.0, 0.0
        for p in order:
            excess = base[p] - (tau + windows[p])
            if excess <= EPS:
                if late or deadline[p] < best_dl:
                    best, late, best_dl = p, False, deadline[p]
            elif late and (
                best < 0 or excess < best_excess or (excess == best_excess and deadline[p] < best_dl)
            ):
                best, best_excess, best_dl = p, excess, deadline[p]
        g = groups[best]
        tau += windows[best]
        cur.ends[best].append(tau)
        cur.seq.append(best)
        k = len(cur.ends[best])
        if k < g.total:
            deadline[best] = dls[best][k]
            base[best] = dispatch_order._ready(g, k, cur.ends[best], prev[best], period) - g.slack
        else:
            order.remove(best)
        if k == need[best]:
            pending -= 1
        if step % dispatch_order._SNAP == dispatch_order._SNAP - 1:
            state = cur.snap(tau)
            if (
                pending == 0
                and last is not None
                and state == last.snaps[len(cur.snaps) - 1]
                and cur.same_ends(last, lags)
            ):
                cur.finish_as(last)
                break
    return cur


def test_eligibility_order_is_the_general_steps(monkeypatch):
    rng = random.Random(9)
    plans = [mp for mp in (random_plan(rng, 3) for _ in range(300)) if len(mp.groups) > 1][:120]
    orders: list[list[int]] = []
    order_eligible = dispatch_build.order_eligible

    def recorded(groups, period, passes=4):
        out = order_eligible(groups, period, passes)
        orders.append(out)
        return out

    monkeypatch.setattr(dispatch_build, "order_eligible", recorded)
    fast = [build_schedule("m", mp, PRICES).model_dump_json() for mp in plans]
    fast_orders, orders[:] = list(orders), []
    monkeypatch.setattr(dispatch_order, "_eligible_pass", reference_pass)
    slow = [build_schedule("m", mp, PRICES).model_dump_json() for mp in plans]
    assert len(fast_orders) > 80 and sum(map(len, fast_orders)) > 20_000
    assert fast_orders == orders  # the order itself, whether or not it beats EDF's
    assert fast == slow


# --------------------------------------------------------------------------- topology


@pytest.mark.parametrize("seed", [0, 3, 7, 66, 151, 404])
def test_topology_is_the_problems_own(seed):
    problem = generate_problem(seed)
    topo = topology(problem)
    assert list(topo.order) == problem.order()
    assert {m: list(p) for m, p in topo.parents.items()} == problem.parents()
    assert {m: list(c) for m, c in topo.children.items()} == problem.children()
    assert list(topo.paths) == problem.paths()
    renamed = problem.model_copy(update={"slo_s": problem.slo_s * 2})
    assert topology(renamed) is topo  # kept per DAG: rates, profiles and SLO do not matter
