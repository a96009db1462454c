"""Dispatch-aware planning: realised worst cases (schedule bound, bursts, overlapping bursts, joins) and
the solve that keeps them within the SLO, checked against the simulator under uniform arrivals."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import planner.robust.realisation
from planner.check import check_plan
from planner.dispatch import build_schedule, planned_spread_rate
from planner.errors import InfeasibleError
from planner.generate import generate_problem
from planner.models import MachineGroup, ModulePlan, Plan, ProblemSpec
from planner.robust import (
    FAN_OUT_KEY,
    annotate,
    planned_spread_rates,
    realise,
    required_capacity,
    required_spread_rate,
    schedule_key,
    share_spread_rates,
    solve_dispatchable,
)
from planner.simulator import simulate

HW = {"gpu": {"price_per_hour": 1.0}}


def module_plan(*groups: tuple[int, int, float, int, float], wcl: float = 10.0) -> ModulePlan:
    """groups: (batch, concurrency, duration_s, machines, rate_per_machine), in TC order."""
    gs = [
        MachineGroup(hardware="gpu", batch=b, concurrency=c, duration_s=d, machines=n, rate_per_machine=f)
        for b, c, d, n, f in groups
    ]
    return ModulePlan(latency_budget_s=wcl, worst_case_latency_s=wcl, groups=gs)


def chain(rate_b: float, plan_b: ModulePlan, fan_out: float | None = None) -> tuple[ProblemSpec, Plan]:
    """Root a (40 req/s on one full batch-4 machine, d = 0.1: Theorem 1 0.1 + 4/40 = 0.2) -> b."""
    extra = {FAN_OUT_KEY: [["a", "b", fan_out]]} if fan_out is not None else {}
    problem = ProblemSpec(
        slo_s=1.0,
        hardware=HW,
        modules={
            "a": {"rate": 40.0, "profile": [{"hardware": "gpu", "batch": 4, "duration_s": 0.1}]},
            "b": {"rate": rate_b, "profile": [{"hardware": "gpu", "batch": 2, "duration_s": 0.05}]},
        },
        edges=[("a", "b")],
        **extra,
    )
    mods = {"a": module_plan((4, 1, 0.1, 1, 40.0), wcl=0.2), "b": plan_b}
    plan = Plan(objective="billed", cost_per_hour=0.0, billed_per_hour=2.0, solve_ms=0.0, modules=mods)
    return problem, plan


# --------------------------------------------------------------------------- required spread rate


@pytest.mark.parametrize(
    ("per_request", "need", "burst"),
    [
        # one window of 4/40 = 0.1 s per period, completing every 0.1 s with up to 4 requests:
        (0.5, 20.0, 2),  # ceil(0.5 * 4) = 2 children per 0.1 s = 20 req/s (the child's own rate)
        (0.6, 30.0, 3),  # ceil(0.6 * 4) = 3 per 0.1 s = 30 req/s: 25 % above the 24 req/s expected
        (2.0, 80.0, 8),  # 8 per 0.1 s
    ],
)
def test_required_rate_of_a_full_root(per_request, need, burst):
    parent = build_schedule("a", module_plan((4, 1, 0.1, 1, 40.0)))
    assert required_spread_rate(parent, per_request, 40.0) == pytest.approx((need, burst))


def test_required_rate_of_a_sparse_root_uses_the_arrival_spacing():
    # Batch-1 machine at 20 req/s (windows 0.05 s) but frames at 4/s: a window holds ceil(4 * 0.05) = 1
    # frame, which sends 2 children; the next frame is 0.25 s later, so the next non-empty completion is
    # at least 0.25 - 0.05 = 0.2 s away: 2 / 0.2 = 10 req/s (the children's own rate is 8).
    parent = build_schedule("a", module_plan((1, 1, 0.05, 1, 20.0)))
    assert required_spread_rate(parent, 2.0, 4.0) == pytest.approx((10.0, 2))
    # at the full 20 frames/s the next completion is the next window: 2 / 0.05 = 40 req/s
    assert required_spread_rate(parent, 2.0, 20.0) == pytest.approx((40.0, 2))


def test_a_root_stream_is_not_assumed_spaced():
    # The same sparse root, as a root: the front keeps each window within ceil(4 * 0.05) = 1 frame
    # but cannot keep frames 0.25 s apart (cameras send when they send), so the next window may hold
    # the next frame: 2 children per 0.05 s = 40 req/s, as at the full rate
    parent = build_schedule("a", module_plan((1, 1, 0.05, 1, 20.0)))
    assert required_spread_rate(parent, 2.0, 4.0, spaced=False) == pytest.approx((40.0, 2))
    # the counts are the same: a batch-4 window of 0.2 s at 10 frames/s holds ceil(10 * 0.2) = 2
    parent = build_schedule("a", module_plan((4, 1, 0.2, 1, 20.0)))
    assert required_spread_rate(parent, 1.0, 10.0, spaced=False)[1] == 2


def test_realise_sizes_the_children_of_a_root_for_unspaced_frames():
    # root a: one batch-1 machine at 20 req/s for 4 frames/s; b: 2 per frame (rate 8), one batch-2
    # machine at 50 req/s. As a root's stream, a's windows may hold a frame each, back to back.
    problem = ProblemSpec(
        slo_s=5.0,
        hardware={"gpu": {"price_per_hour": 1.0}},
        modules={
            "a": {"rate": 4.0, "profile": [{"hardware": "gpu", "batch": 1, "duration_s": 0.05}]},
            "b": {"rate": 8.0, "profile": [{"hardware": "gpu", "batch": 2, "duration_s": 0.02}]},
        },
        edges=[("a", "b")],
    )
    mods = {
        "a": module_plan((1, 1, 0.05, 1, 20.0), wcl=0.1),
        "b": module_plan((2, 1, 0.02, 1, 50.0), wcl=0.06),
    }
    plan = Plan(objective="billed", cost_per_hour=0.0, billed_per_hour=2.0, solve_ms=0.0, modules=mods)
    real = realise(problem, plan)
    assert real["b"].required_rate == pytest.approx(40.0)
    assert real["b"].burst == 2


def test_multi_config_parent_with_coinciding_completions_needs_an_unbounded_rate():
    # W = 40 req/s: windows of 1/40 (b = 1, c = 2, d = 0.075) and 2/40 (b = 2, d = 0.1) s, period 0.1 s:
    # [0, .025) b1, [.025, .075) b2, [.075, .1) b1. The b2 batch completes at .075 + .1 = .175 and the
    # second b1 batch at .1 + .075 = .175 too: no time at all to spread the first burst.
    parent = build_schedule("a", module_plan((2, 1, 0.1, 1, 20.0), (1, 2, 0.075, 1, 20.0)))
    assert [(w.group, round(w.end_s, 9)) for w in parent.windows] == [(1, 0.025), (0, 0.075), (1, 0.1)]
    need, burst = required_spread_rate(parent, 1.0, 60.0)
    assert math.isinf(need) and burst == 2


# --------------------------------------------------------------------------- realise


def test_realise_adds_the_burst_of_a_parent_batch():
    # b: one full batch-2 machine (t = 2 / 0.05 = 40 req/s), Theorem 1 0.05 + 2/40 = 0.1. A batch of a
    # (4 requests) sends ceil(0.5 * 4) = 2 children; b is a leaf, so it spreads them at its capacity
    # (40 req/s, a hair below): the second waits 1/40 s more, 0.125 s in all.
    problem, plan = chain(20.0, module_plan((2, 1, 0.05, 1, 40.0), wcl=0.1))
    real = realise(problem, plan)
    a, b = real["a"], real["b"]
    assert (a.burst, a.burst_s, a.worst_case_s) == (1, 0.0, pytest.approx(0.2))
    assert b.burst == 2
    assert b.spread_rate == pytest.approx(40.0, rel=1e-5)
    assert b.worst_case_s == pytest.approx(0.1 + 1 / 40, rel=1e-5)
    assert b.required_rate == pytest.approx(20.0)  # 2 children per 0.1 s
    assert b.collision_free and b.guaranteed


def test_fan_out_hint_sizes_the_burst():
    # The data plane sends up to ceil(f) children per request: 4 * 1 = 4 per batch of a, at 40 req/s
    # that is 40 req/s of spread needed, which b's 40 req/s capacity just misses (a hair below).
    problem, plan = chain(20.0, module_plan((2, 1, 0.05, 1, 40.0), wcl=0.1), fan_out=1.0)
    b = realise(problem, plan)["b"]
    assert b.burst == 4
    assert b.required_rate == pytest.approx(40.0)
    assert not b.collision_free
    # with a second machine b can take it: spread at 80 req/s, last of 4 waits 3/80 s more
    problem, plan = chain(20.0, module_plan((2, 1, 0.05, 2, 40.0), wcl=0.075), fan_out=1.0)
    b = realise(problem, plan)["b"]
    assert b.collision_free
    assert b.worst_case_s == pytest.approx(0.075 + 3 / 80, rel=1e-5)


def test_multi_config_schedule_bound_replaces_theorem1():
    # docs/dispatch.md's counter-example: b = 10, d = 1 and b = 3, d = 0.3, both full at 10 req/s.
    # Theorem 1 gives 1 + 10/20 = 1.5 s for the top group; contiguous windows realise 1.6 s.
    mp = module_plan((10, 1, 1.0, 1, 10.0), (3, 1, 0.3, 1, 10.0), wcl=1.5)
    problem = ProblemSpec(
        slo_s=2.0,
        hardware=HW,
        modules={
            "m": {
                "rate": 20.0,
                "profile": [
                    {"hardware": "gpu", "batch": 10, "duration_s": 1.0},
                    {"hardware": "gpu", "batch": 3, "duration_s": 0.3},
                ],
            }
        },
    )
    plan = Plan(objective="billed", cost_per_hour=2.0, billed_per_hour=2.0, solve_ms=0.0, modules={"m": mp})
    r = realise(problem, plan)["m"]
    assert (r.planned_s, r.schedule_s, r.worst_case_s) == pytest.approx((1.5, 1.6, 1.6))
    # annotate() writes the realised figure; realising the annotated plan again gives the same figures
    annotated = annotate(problem, plan, {"m": r})
    assert annotated.modules["m"].worst_case_latency_s == pytest.approx(1.6)
    assert annotated.modules["m"].dispatch["theorem1_s"] == pytest.approx(1.5)
    assert realise(problem, annotated)["m"].worst_case_s == pytest.approx(1.6)
    # measured under uniform arrivals: above Theorem 1, within the realised figure
    m = simulate(problem, annotated, 40.0).modules["m"]
    assert 1.5 < m.measured_worst_case_s <= 1.6 + 1e-9
    assert m.within_plan


# --------------------------------------------------------------------------- joins


def join(c_plan: ModulePlan) -> tuple[ProblemSpec, Plan]:
    """Roots a1 (40 req/s: one full batch-4 machine, d = 0.1, windows 0.1 s) and a2 (40 req/s: one full
    batch-2 machine, d = 0.05, windows 0.05 s) -> join c (30 req/s: 30 / 80 = 0.375 per parent request)."""
    problem = ProblemSpec(
        slo_s=1.0,
        hardware=HW,
        modules={
            "a1": {"rate": 40.0, "profile": [{"hardware": "gpu", "batch": 4, "duration_s": 0.1}]},
            "a2": {"rate": 40.0, "profile": [{"hardware": "gpu", "batch": 2, "duration_s": 0.05}]},
            "c": {"rate": 30.0, "profile": [{"hardware": "gpu", "batch": 4, "duration_s": 0.04}]},
        },
        edges=[("a1", "c"), ("a2", "c")],
    )
    mods = {
        "a1": module_plan((4, 1, 0.1, 1, 40.0), wcl=0.2),
        "a2": module_plan((2, 1, 0.05, 1, 40.0), wcl=0.1),
        "c": c_plan,
    }
    plan = Plan(objective="billed", cost_per_hour=0.0, billed_per_hour=3.0, solve_ms=0.0, modules=mods)
    return problem, plan


def test_required_capacity_counts_whole_places_per_stream():
    # a stream spread at x puts up to ceil(b x / C) requests in a window of b / C seconds, whatever its
    # phase against the other streams: the streams need whole places of the window's b
    assert required_capacity([20.0], [4]) == pytest.approx(20.0)  # one stream: its own rate
    assert required_capacity([20.0, 20.0], [4]) == pytest.approx(40.0)  # 2 + 2 places of 4
    assert required_capacity([20.0, 10.0], [3]) == pytest.approx(30.0)  # 2 + 1 places of 3
    assert required_capacity([20.0, 20.0], [3]) == pytest.approx(60.0)  # 1 + 2: not 40 (2 + 2 > 3)
    assert required_capacity([20.0, 20.0], [3, 4]) == pytest.approx(60.0)  # every batch size must fit
    assert math.isinf(required_capacity([20.0, 20.0], [1]))  # a batch of 1 cannot take two streams
    assert required_capacity([], [4]) == 0.0


def test_shares_of_a_join():
    needs, bursts = {"a1": 20.0, "a2": 20.0}, {"a1": 2, "a2": 1}
    # a leaf: each needs ceil(4 * 20 / 100) = 1 place of 4; the two spare places go to the stream with
    # the larger burst term (n - 1) / a: a1 gets 3 places (75 req/s), a2 keeps 1 (25 req/s)
    leaf = share_spread_rates(needs, bursts, [4], 100.0, leaf=True)
    assert leaf == pytest.approx({"a1": 75.0, "a2": 25.0}, rel=1e-5)
    # a module with children keeps its streams as sparse as allowed: at their needs
    inner = share_spread_rates(needs, bursts, [4], 100.0, leaf=False)
    assert inner == pytest.approx({"a1": 20.0, "a2": 20.0}, rel=1e-5)
    # below the required capacity (40) the streams do not fit
    assert share_spread_rates(needs, bursts, [4], 39.0, leaf=True) is None


def test_join_gets_per_parent_spread_rates():
    # c: one batch-4 machine, d = 0.04, at 100 req/s (W = W' = 100, windows 0.04 s). Theorem 1: 0.08 s.
    # a1's batch (4) sends ceil(0.375 * 4) = 2 c's every 0.1 s: 20 req/s; a2's (2) sends 1 every 0.05 s:
    # 20 req/s. Shares of the 4 places: a1 3 (75 req/s), a2 1 (25 req/s); the last of a1's burst of 2
    # waits 1/75 s more: 0.08 + 0.01333 = 0.09333 s. A window of 0.04 s then receives at most
    # ceil(4 * 75 / 100) + ceil(4 * 25 / 100) = 3 + 1 = 4 requests, whatever the phases of a1 and a2.
    problem, plan = join(module_plan((4, 1, 0.04, 1, 100.0), wcl=0.08))
    c = realise(problem, plan)["c"]
    assert c.guaranteed and c.collision_free
    assert c.required_rates == pytest.approx({"a1": 20.0, "a2": 20.0})
    assert c.bursts == {"a1": 2, "a2": 1} and c.burst == 2
    assert c.spread_rates == pytest.approx({"a1": 75.0, "a2": 25.0}, rel=1e-5)
    assert c.required_rate == pytest.approx(40.0)  # 2 + 2 of the 4 places at their needs
    assert c.worst_case_s == pytest.approx(0.08 + 1 / 75, rel=1e-5)
    # splitting the capacity by rate alone is not enough: 60 + 40 = 100 req/s, but a window of 0.04 s can
    # hold ceil(2.4) = 3 of a1's requests (0, 1/60, 2/60) and ceil(1.6) = 2 of a2's (0.001, 0.026): 5 > 4
    assert not dataclasses.replace(c, spread_rates={"a1": 60.0, "a2": 40.0}).collision_free
    # the plan records the per-parent rates; the simulator spreads each parent's children at its own
    annotated = annotate(problem, plan, realise(problem, plan))
    assert annotated.guaranteed is True
    assert planned_spread_rates(annotated.modules["c"]) == pytest.approx({"a1": 75.0, "a2": 25.0}, rel=1e-5)
    assert planned_spread_rate(annotated.modules["c"], 1.0) == pytest.approx(25.0, rel=1e-5)  # the smallest
    m = simulate(problem, annotated, 20.0).modules["c"]
    assert m.overflow_batches == 0 and m.within_plan
    assert m.measured_worst_case_s <= 0.08 + 1 / 75 + 1e-9


def test_join_below_its_required_capacity_is_repaired():
    # c at 30 req/s on one batch-4 machine (d = 0.04, t = 100): capacity 30 < 40 required (2 + 2 places)
    problem, plan = join(module_plan((4, 1, 0.04, 1, 30.0), wcl=0.173))
    c = realise(problem, plan)["c"]
    assert c.required_rate == pytest.approx(40.0) and not c.collision_free
    # the dispatch-aware solve plans c for its required capacity (40 req/s: 33 % above its rate)
    solved = solve_dispatchable(problem)
    mp = solved.modules["c"]
    assert mp.dispatch["guaranteed"] is True and solved.guaranteed is True
    planned = sum(g.machines * g.rate_per_machine for g in mp.groups)
    assert planned >= 40.0
    assert mp.dispatch["required_rate"] - 1e-9 <= mp.dispatch["capacity_rate"]
    assert set(mp.dispatch["spread_rates"]) == {"a1", "a2"}
    report = simulate(problem, solved, 20.0)
    assert all(s.overflow_batches == 0 and s.within_plan for s in report.modules.values())


def test_generated_join_is_guaranteed_and_within_its_figure():
    problem = generate_problem(7)  # random DAG whose m3 has two parents (m2 and m0)
    joins = [m for m, ps in problem.parents().items() if len(ps) > 1]
    assert joins == ["m3"]
    plan = solve_dispatchable(problem)
    assert plan.guaranteed is True
    info = plan.modules["m3"].dispatch
    assert set(info["spread_rates"]) == {"m2", "m0"}
    assert all(info["spread_rates"][p] >= info["required_rates"][p] * (1 - 1e-9) for p in ("m2", "m0"))
    report = simulate(problem, plan, 8.0)
    m3 = report.modules["m3"]
    assert m3.overflow_batches == 0
    assert m3.measured_worst_case_s <= plan.modules["m3"].worst_case_latency_s + 1e-9


def test_router_spreads_each_parent_at_its_own_rate():
    from core.routing import Router
    from core.schema import Deployment

    problem, plan = join(module_plan((4, 1, 0.04, 1, 100.0), wcl=0.08))
    annotated = annotate(problem, plan, realise(problem, plan))
    dep = Deployment(
        app="x", version=1, origin_s=0.0, slo_s=1.0, frame_rate=40.0, roots=["a1", "a2"],
        edges=[("a1", "c", 0.375), ("a2", "c", 0.375)], plan=annotated,
        queues={m: {"0/0": f"q-{m}"} for m in ("a1", "a2", "c")},
    )  # fmt: skip
    router = Router.for_deployment(dep)
    # windows of c close every 0.04 s; a1's 3 requests are 1/75 s apart (0, .0133, .0267: one window),
    # a2's 1/25 s apart (0, .04, .08: three windows); without a parent, the smallest rate (a2's)
    assert [r.batch_id for r in router.route_burst("c", 0.001, 3, parent="a1")] == [0, 0, 0]
    assert [r.batch_id for r in router.route_burst("c", 0.001, 3, parent="a2")] == [0, 1, 2]
    assert [r.batch_id for r in router.route_burst("c", 0.001, 3)] == [0, 1, 2]


# --------------------------------------------------------------------------- dispatch-aware solve


def test_schedule_excess_is_repaired_by_shrinking_the_splitter_slo():
    # A one-module problem whose billed optimum mixes two configurations: Theorem 1 fits the SLO, the
    # windows realise more, so the plain plan is not realisable; the repaired plan is, at a price.
    problem = generate_problem(136)
    plan = solve_dispatchable(problem)
    assert plan.plain_realised_worst_path_s > problem.slo_s
    assert plan.dispatch_rounds > 1 and plan.splitter_slo_s < problem.slo_s
    assert plan.billed_per_hour >= plan.plain_billed_per_hour
    assert plan.price_of_realisability == pytest.approx(plan.billed_per_hour / plan.plain_billed_per_hour - 1)
    mp = plan.modules["m0"]
    assert mp.worst_case_latency_s == pytest.approx(mp.dispatch["worst_case_latency_s"])
    assert mp.worst_case_latency_s >= mp.dispatch["schedule_s"] - 1e-12
    assert all(p["worst_case_latency_s"] <= problem.slo_s + 1e-9 for p in plan.paths)
    assert check_plan(problem, plan) == []  # Theorem 1 still holds below the realised figures


def test_child_headroom_is_planned_and_reported():
    problem = generate_problem(2)  # m0 -> m1
    plan = solve_dispatchable(problem, child_headroom=0.25)
    child = plan.modules["m1"]
    assert child.child_headroom == 0.25 and plan.modules["m0"].child_headroom == 0.0
    assert child.planned_for_rate >= problem.modules["m1"].rate * 1.25 * (1 - 1e-12)
    planned = sum(g.machines * g.rate_per_machine for g in child.groups)
    assert child.headroom_used == pytest.approx(planned / problem.modules["m1"].rate - 1)
    assert child.headroom_used >= 0.25 - 1e-9
    assert child.dummy_rate == pytest.approx(planned - problem.modules["m1"].rate)
    assert check_plan(problem, plan) == []


def test_bad_parameters_and_infeasible_problems():
    problem = generate_problem(2)
    with pytest.raises(ValueError, match="max_rounds"):
        solve_dispatchable(problem, max_rounds=0)
    with pytest.raises(ValueError, match="child_headroom"):
        solve_dispatchable(problem, child_headroom=-0.1)
    tight = problem.model_copy(update={"slo_s": 1e-4})
    with pytest.raises(InfeasibleError):
        solve_dispatchable(tight)


def _untimed(plan: Plan) -> str:
    return plan.model_copy(update={"solve_ms": 0.0, "solve_cpu_ms": 0.0}).model_dump_json()


@pytest.mark.parametrize("seed", [2, 11])
def test_given_schedules_are_filled_and_change_nothing_but_time(seed, monkeypatch):
    built = []
    real_build = planner.robust.realisation.build_schedule

    def counted(*args, **kwargs):
        built.append(args[0])
        return real_build(*args, **kwargs)

    monkeypatch.setattr(planner.robust.realisation, "build_schedule", counted)
    problem = generate_problem(seed)
    # GIVEN a plan solved with the solver's own schedules
    own = solve_dispatchable(problem)
    alone = len(built)
    # WHEN it is solved with a given dict, then again with the same dict
    schedules: dict = {}
    shared = solve_dispatchable(problem, schedules=schedules)
    again = solve_dispatchable(problem, schedules=schedules)
    # THEN the plans are the same, the dict holds the plan's schedules, and the second solve builds none
    assert _untimed(shared) == _untimed(own) == _untimed(again)
    prices = {h: x.price_per_hour for h, x in problem.hardware.items()}
    assert {schedule_key(m, mp, prices) for m, mp in shared.modules.items()} <= set(schedules)
    assert len(built) == 2 * alone


def test_schedule_cache_key_covers_the_prices():
    # two groups whose throughput-cost order (and so Theorem 1, the slack and the schedule) depends on
    # the hardware prices: t = 10 req/s on gpu and on cpu
    profile = [
        {"hardware": "gpu", "batch": 10, "duration_s": 1.0},
        {"hardware": "cpu", "batch": 3, "duration_s": 0.3},
    ]
    mp = ModulePlan(
        latency_budget_s=1.5,
        worst_case_latency_s=1.5,
        groups=[
            MachineGroup(hardware="gpu", batch=10, duration_s=1.0, machines=1, rate_per_machine=10.0),
            MachineGroup(hardware="cpu", batch=3, duration_s=0.3, machines=1, rate_per_machine=10.0),
        ],
    )
    plan = Plan(objective="billed", cost_per_hour=2.0, billed_per_hour=2.0, solve_ms=0.0, modules={"m": mp})

    def problem(cpu_price: float) -> ProblemSpec:
        hw = {"gpu": {"price_per_hour": 1.0}, "cpu": {"price_per_hour": cpu_price}}
        return ProblemSpec(slo_s=3.0, hardware=hw, modules={"m": {"rate": 20.0, "profile": profile}})

    cheap, dear = problem(1.0), problem(2.0)
    assert realise(cheap, plan)["m"].schedule != realise(dear, plan)["m"].schedule  # the prices matter
    shared: dict = {}
    for p in (cheap, dear):
        assert realise(p, plan, cache=shared)["m"].schedule == realise(p, plan)["m"].schedule
    assert len(shared) == 2


def test_spread_rate_reaches_the_data_plane():
    problem, plan = chain(20.0, module_plan((2, 1, 0.05, 1, 40.0), wcl=0.1))
    annotated = annotate(problem, plan, realise(problem, plan))
    assert planned_spread_rate(annotated.modules["b"], 1.0) == pytest.approx(40.0, rel=1e-5)
    assert planned_spread_rate(plan.modules["b"], 123.0) == 123.0  # a plain plan: the caller's default


# --------------------------------------------------------------------------- property: the simulator agrees


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 100_000), st.sampled_from(["billed", "occupancy"]))
def test_simulated_worst_case_within_the_realised_plan(seed, objective):
    # GIVEN a generated problem (joins included: each parent's stream has its own spread rate)
    problem = generate_problem(seed)
    try:
        plan = solve_dispatchable(problem, objective=objective)
    except InfeasibleError:
        assume(False)
    # WHEN it is simulated under uniform arrivals
    # THEN no window overflows, every module stays within its realised figure and every path within the SLO
    assert_simulated_within(problem, plan)


def assert_simulated_within(problem, plan):
    """``plan`` simulated 8 s under uniform arrivals: no window overflows, every module within its
    realised figure, every path and every frame within the SLO."""
    report = simulate(problem, plan, 8.0)
    for name, m in report.modules.items():
        assert m.overflow_batches == 0, name
        assert m.measured_worst_case_s <= plan.modules[name].worst_case_latency_s + 1e-9, name
    assert all(p["worst_case_latency_s"] <= problem.slo_s + 1e-9 for p in plan.paths)
    assert report.end_to_end.latency.max_s <= problem.slo_s + 1e-9
    assert report.end_to_end.slo_attainment == 1.0


def _next_join(seed: int) -> int:
    """The first generated problem at or after ``seed`` that has a join (about 1 in 20 has one)."""
    while not any(len(ps) > 1 for ps in generate_problem(seed).parents().values()):
        seed += 1
    return seed


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 100_000).map(_next_join), st.sampled_from(["billed", "occupancy"]))
def test_simulated_joins_within_the_realised_plan(seed, objective):
    # GIVEN a generated problem with a join, solved dispatch-aware
    problem = generate_problem(seed)
    try:
        plan = solve_dispatchable(problem, objective=objective)
    except InfeasibleError:
        assume(False)
    assert plan.guaranteed is True
    # WHEN it is simulated under uniform arrivals, each parent spreading at its own rate
    report = simulate(problem, plan, 8.0)
    # THEN no window of any module (the join included) overflows and every figure holds
    for name, m in report.modules.items():
        assert m.overflow_batches == 0, name
        assert m.measured_worst_case_s <= plan.modules[name].worst_case_latency_s + 1e-9, name
    assert report.end_to_end.latency.max_s <= problem.slo_s + 1e-9
    assert report.end_to_end.slo_attainment == 1.0
