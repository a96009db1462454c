"""The latency-only overhead (``overhead_s``, the hop that delivers a module's requests): it lengthens every
worst case by exactly itself and occupies no machine (throughput counts device time only)."""

from __future__ import annotations

import math

import pytest

from planner.check import check_plan
from planner.dispatch import build_schedule
from planner.generate import generate_problem
from planner.latency import Config, Group, configs_for, group_latencies, worst_case
from planner.models import MachineGroup, ModulePlan, ProblemSpec
from planner.robust import solve_dispatchable
from planner.simulator import simulate
from planner.solve import solve

HOP = 0.05


def with_hop(problem: ProblemSpec, hop: float, slo_extra: float = 0.0) -> ProblemSpec:
    modules = {
        m: spec.model_copy(
            update={"profile": [e.model_copy(update={"overhead_s": hop}) for e in spec.profile]}
        )
        for m, spec in problem.modules.items()
    }
    return problem.model_copy(update={"modules": modules, "slo_s": problem.slo_s + slo_extra})


def test_overhead_keeps_throughput_and_adds_exactly_itself_to_the_worst_case():
    # a T4 batch of 32 of resnet18: d = 10.2 ms, t = 32 / 0.0102 = 3,137.25 req/s with or without the hop
    plain = Config("t4", 32, 1, 0.0102, 0.526)
    hop = Config("t4", 32, 1, 0.0102, 0.526, HOP)
    assert hop.throughput == plain.throughput == pytest.approx(3137.2549, rel=1e-6)
    assert hop.ratio == plain.ratio
    # at w = t: d + o + b / w = 0.0102 + 0.05 + 0.0102 = 0.0704 s (without the hop 0.0204 s)
    assert hop.tc_latency(hop.throughput) == pytest.approx(0.0704)
    assert hop.tc_latency(500.0) - plain.tc_latency(500.0) == pytest.approx(HOP, abs=1e-12)
    groups, bare = [Group(hop, 2, 3000.0)], [Group(plain, 2, 3000.0)]
    for model in ("tc", "rr", "dt"):
        assert worst_case(groups, model) - worst_case(bare, model) == pytest.approx(HOP, abs=1e-12)
    assert group_latencies(groups)[0] == pytest.approx(0.0102 + HOP + 32 / 6000)


def test_min_rate_leaves_the_overhead_out_of_the_gap():
    # d + o + b / w <= L: w >= b / (L - d - o) = 4 / (0.25 - 0.1 - 0.05) = 40 req/s (no hop: 4 / 0.15)
    c = Config("h", 4, 1, 0.1, 1.0, HOP)
    assert c.min_rate(0.25) == pytest.approx(40.0)
    assert Config("h", 4, 1, 0.1, 1.0).min_rate(0.25) == pytest.approx(4 / 0.15)
    assert math.isinf(c.min_rate(0.15))  # d + o = 0.15 uses the whole budget


def test_profile_entry_overhead_reaches_the_configs_and_is_written_only_when_set():
    problem = chain(0.0)
    assert "overhead_s" not in problem.model_dump_json()
    assert all(c.overhead == 0.0 for c in configs_for(problem.modules["a"].profile, problem.hardware))
    hopped = chain(HOP)
    assert '"overhead_s":0.05' in hopped.model_dump_json()
    cs = configs_for(hopped.modules["a"].profile, hopped.hardware)
    assert {c.overhead for c in cs} == {HOP} and all(c.floor == c.duration + HOP for c in cs)


def chain(hop: float, slo: float = 0.34) -> ProblemSpec:
    """a -> b at 10 req/s. a: big (b 8, d 0.1, $1, t 80) or small (b 1, d 0.05, $1.5, t 20); b: one
    config (b 1, d 0.05, $1, t 20)."""
    entry = {"overhead_s": hop} if hop else {}
    return ProblemSpec.model_validate(
        {
            "slo_s": slo,
            "hardware": {"big": {"price_per_hour": 1.0}, "small": {"price_per_hour": 1.5}},
            "modules": {
                "a": {
                    "rate": 10.0,
                    "profile": [
                        {"hardware": "big", "batch": 8, "duration_s": 0.1, **entry},
                        {"hardware": "small", "batch": 1, "duration_s": 0.05, **entry},
                    ],
                },
                "b": {
                    "rate": 10.0,
                    "profile": [{"hardware": "big", "batch": 1, "duration_s": 0.05, **entry}],
                },
            },
            "edges": [["a", "b"]],
        }
    )


@pytest.mark.parametrize("policy", ["skinflint", "optimal"])
def test_the_hop_moves_the_optimum_of_a_chain(policy):
    # no hop: a on one big machine (0.1 + 8 / 80 = 0.2 s) + b on one (0.05 + 1 / 20 = 0.1 s): 0.3 <= 0.34,
    # $1 + $1 = $2 (each module needs a machine of at least $1: the cheapest possible)
    plain = solve(chain(0.0), policy, "billed")
    assert plain.billed_per_hour == pytest.approx(2.0)
    assert [g.hardware for g in plain.modules["a"].groups] == ["big"]
    # hop 0.05 s: big a is 0.25 s and b 0.15 s: 0.4 > 0.34; two big a (0.1 + 0.05 + 8 / 160 = 0.2) still
    # 0.35 > 0.34; two b (0.05 + 0.05 + 1 / 40 = 0.125) with big a 0.375. Small a: 0.05 + 0.05 + 1 / 20 =
    # 0.15, + 0.15 = 0.3: $1.5 + $1 = $2.5
    hopped = chain(HOP)
    plan = solve(hopped, policy, "billed")
    assert plan.billed_per_hour == pytest.approx(2.5)
    assert [g.hardware for g in plan.modules["a"].groups] == ["small"]
    assert plan.modules["a"].worst_case_latency_s == pytest.approx(0.15)
    assert plan.modules["b"].worst_case_latency_s == pytest.approx(0.15)
    assert all(g.overhead_s == HOP for mp in plan.modules.values() for g in mp.groups)
    assert check_plan(hopped, plan) == []
    # the old model (hop in the duration) bills the hop as device time: small a is d = 0.1 s, t = 10, one
    # machine 0.1 + 1 / 10 = 0.2 s; b is d = 0.1 s, t = 10: three machines 0.1 + 1 / 30 = 0.1333 s
    # (two: 0.15, 0.35 > 0.34): $1.5 + 3 x $1 = $4.5 for the same SLO
    old = chain(0.0)
    slower = {
        m: s.model_copy(
            update={"profile": [e.model_copy(update={"duration_s": e.duration_s + HOP}) for e in s.profile]}
        )
        for m, s in old.modules.items()
    }
    assert solve(
        old.model_copy(update={"modules": slower}), policy, "billed"
    ).billed_per_hour == pytest.approx(4.5)


def test_plans_without_overhead_serialise_as_before():
    plan = solve(chain(0.0), "skinflint", "billed")
    assert "overhead_s" not in plan.model_dump_json()
    assert '"overhead_s":0.05' in solve(chain(HOP), "skinflint", "billed").model_dump_json()


@pytest.mark.parametrize("seed", [3, 11, 29])
@pytest.mark.parametrize("objective", ["occupancy", "billed"])
def test_the_exhaustive_reference_agrees_with_overheads(seed, objective):
    base = generate_problem(seed)
    longest = max(len(p) for p in base.paths())
    problem = with_hop(base, 0.02, slo_extra=0.02 * longest)  # the same slack above the floors
    a, b = solve(problem, "skinflint", objective), solve(problem, "optimal", objective)
    key = "cost_per_hour" if objective == "occupancy" else "billed_per_hour"
    assert math.isclose(getattr(a, key), getattr(b, key), rel_tol=1e-7)
    assert check_plan(problem, a) == [] and check_plan(problem, b) == []
    for mp in a.modules.values():  # every worst case holds the hop: d + o + b / w >= d + o
        assert mp.worst_case_latency_s >= min(g.duration_s for g in mp.groups) + 0.02 - 1e-12


def test_a_schedule_adds_the_overhead_to_its_bounds_and_changes_no_window():
    mp = ModulePlan(
        latency_budget_s=1.0,
        worst_case_latency_s=0.0,
        groups=[MachineGroup(hardware="h", batch=4, machines=2, rate_per_machine=30.0, duration_s=0.1)],
    )
    hopped = mp.model_copy(update={"groups": [g.model_copy(update={"overhead_s": HOP}) for g in mp.groups]})
    plain, hop = build_schedule("m", mp), build_schedule("m", hopped)
    # Theorem 1: 0.1 + 4 / 60 = 0.1667 s, with the hop 0.2167 s; the windows are the same
    assert plain.theorem1_s == pytest.approx(0.1 + 4 / 60)
    assert hop.theorem1_s - plain.theorem1_s == pytest.approx(HOP)
    assert hop.worst_case_latency_s - plain.worst_case_latency_s == pytest.approx(HOP)
    assert hop.groups[0].guarantee_s - plain.groups[0].guarantee_s == pytest.approx(HOP)
    assert hop.windows.end.tolist() == plain.windows.end.tolist()
    assert hop.period_s == plain.period_s
    assert "overhead_s" not in plain.model_dump_json()


def hopped_chain() -> ProblemSpec:
    return with_hop(generate_problem(2, "random"), HOP, slo_extra=0.2)


def test_the_dispatch_aware_solve_holds_the_overhead_in_every_worst_case():
    problem = hopped_chain()
    plan = solve_dispatchable(problem)
    assert plan.guaranteed is True
    for m, mp in plan.modules.items():
        load = sum(g.machines * g.rate_per_machine for g in mp.groups)
        # w <= W: every group's Theorem 1 figure d + o + b / w >= d + o + b / W
        least = max(g.duration_s + g.overhead_s + g.batch / load for g in mp.groups)
        assert all(g.overhead_s == HOP for g in mp.groups), m
        assert mp.worst_case_latency_s >= least - 1e-12, m
        assert mp.dispatch["schedule_s"] >= HOP, m
    for path in plan.paths:
        assert path["worst_case_latency_s"] <= problem.slo_s + 1e-9


def test_the_simulated_hop_is_measured_and_stays_within_the_plan():
    problem = hopped_chain()
    plan = solve_dispatchable(problem)
    report = simulate(problem, plan, 6.0)
    assert report.all_within_plan
    assert report.end_to_end.slo_attainment == 1.0
    for m, stats in report.modules.items():
        floor = min(g.duration_s for g in plan.modules[m].groups) + HOP
        assert stats.latency.p50_s >= floor - 1e-9, m  # every request waited for its hop
        assert stats.measured_worst_case_s <= stats.planned_worst_case_s + 1e-9, m
    # the end-to-end latency holds one hop per module of a path
    shortest = min(len(p) for p in problem.paths())
    assert report.end_to_end.latency.p50_s >= shortest * HOP
