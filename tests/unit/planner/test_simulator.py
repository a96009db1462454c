"""Simulator: Theorem 1 holds for the TC schedule under uniform arrivals; RR gives ~2d; DAG flow."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner.simulator as sim
from planner.dispatch import build_schedule
from planner.models import MachineGroup, ModulePlan, Plan, ProblemSpec
from planner.simulator import SimulationReport, simulate
from tests.unit.planner.test_dispatch import M4, module_plan, plans, theorem1

HW = {"gpu": {"price_per_hour": 1.0}}


def single(mp: ModulePlan, rate: float, slo: float = 10.0) -> tuple[ProblemSpec, Plan]:
    profile = [
        {"hardware": "gpu", "batch": g.batch, "concurrency": g.concurrency, "duration_s": g.duration_s}
        for g in mp.groups
    ]
    problem = ProblemSpec(slo_s=slo, hardware=HW, modules={"m": {"rate": rate, "profile": profile}})
    wcl = max(theorem1(mp))
    mp = mp.model_copy(update={"worst_case_latency_s": wcl})
    plan = Plan(objective="billed", cost_per_hour=0.0, billed_per_hour=0.0, solve_ms=0.0, modules={"m": mp})
    return problem, plan


def test_m4_tc_uniform_within_theorem1():
    # 8 req/s uniform (no dummy): worst case 2.0 + 6/8 = 2.75 s for A and B, C 1.0 + 2/8 = 1.25 s
    problem, plan = single(M4, 8.0)
    r = simulate(problem, plan, 60.0)
    m = r.modules["m"]
    assert m.requests == 480
    assert m.measured_worst_case_s <= 2.75 + 1e-9
    # the first arrival comes at most 1/8 s after a window opens
    assert m.measured_worst_case_s >= 2.75 - 1 / 8
    assert m.within_plan and m.within_schedule
    assert m.overflow_batches == 0 and m.empty_windows == 0 and m.mean_fill == pytest.approx(1.0)
    assert r.end_to_end.slo_attainment == 1.0


def test_rr_gives_about_two_d():
    # 2 machines, b = 4, d = 0.1, full at 40 req/s each (W = 80). RR: each machine collects 4 of its own
    # requests at 40 req/s (0.075 s after the first) then runs 0.1 s: ~2d = 0.2. TC: 0.1 + 4/80 = 0.15.
    mp = module_plan((4, 1, 0.1, 2, 40.0))
    problem, plan = single(mp, 80.0)
    rr = simulate(problem, plan, 30.0, dispatch="rr").modules["m"]
    tc = simulate(problem, plan, 30.0, dispatch="tc").modules["m"]
    assert 0.17 <= rr.measured_worst_case_s <= 0.2 + 1e-9
    assert tc.measured_worst_case_s <= 0.15 + 1e-9
    assert tc.measured_worst_case_s < rr.measured_worst_case_s


@settings(max_examples=40, deadline=None)
@given(plans(), st.sampled_from([1.0, 0.9, 0.6]))
def test_uniform_arrivals_stay_within_the_bound(mp, real_share):
    # Arrivals at the real rate (planned rate minus dummy). The measured worst case never exceeds the
    # schedule's exact bound; for one configuration that is Theorem 1 itself, else max(Theorem 1,
    # d + sum of batch sizes / W') (docs/dispatch.md).
    rate = sum(g.machines * g.rate_per_machine for g in mp.groups) * real_share
    problem, plan = single(mp, rate)
    s = build_schedule("m", mp)
    duration = min(20.0, max(4 * s.period_s, 2.0))
    m = simulate(problem, plan, duration).modules["m"]
    assert m.overflow_batches == 0
    assert m.measured_worst_case_s <= s.worst_case_latency_s + 1e-9
    t1 = theorem1(mp)
    if len(mp.groups) == 1:
        assert m.measured_worst_case_s <= t1[0] + 1e-9
    spread = sum(g.batch for g in mp.groups) / s.effective_rate
    assert m.measured_worst_case_s <= max(*t1, max(g.duration_s for g in mp.groups) + spread) + 1e-9


def chain() -> tuple[ProblemSpec, Plan]:
    # Piccolo's chain a (50 req/s) -> b (40 req/s); each module on two batch-4 machines at full throughput.
    problem = ProblemSpec(
        slo_s=0.9,
        hardware=HW,
        modules={
            "a": {"rate": 50.0, "profile": [{"hardware": "gpu", "batch": 4, "duration_s": 0.16}]},
            "b": {"rate": 40.0, "profile": [{"hardware": "gpu", "batch": 4, "duration_s": 0.2}]},
        },
        edges=[("a", "b")],
    )
    mods = {
        "a": module_plan((4, 1, 0.16, 2, 25.0)),  # 0.16 + 4/50 = 0.24
        "b": module_plan((4, 1, 0.2, 3, 20.0)),  # dummy 20 req/s: 0.2 + 4/60 = 0.267
    }
    mods = {k: v.model_copy(update={"worst_case_latency_s": theorem1(v)[0]}) for k, v in mods.items()}
    plan = Plan(objective="billed", cost_per_hour=0.0, billed_per_hour=0.0, solve_ms=0.0, modules=mods)
    return problem, plan


def test_chain_flows_down_the_dag():
    problem, plan = chain()
    r = simulate(problem, plan, 30.0)
    a, b = r.modules["a"], r.modules["b"]
    assert a.requests == 1500
    assert b.requests == 1200  # 40/50 of a's completed requests, by fractional accumulation
    assert a.within_plan
    assert r.end_to_end.paths == b.requests
    assert r.end_to_end.latency.max_s >= a.latency.max_s
    assert r.end_to_end.planned_worst_case_s == pytest.approx(0.24 + 0.2 + 4 / 60)
    assert SimulationReport.model_validate_json(r.model_dump_json()) == r


@pytest.mark.parametrize("dispatch", ["tc", "rr"])
def test_chunking_does_not_change_results(monkeypatch, dispatch):
    # Chunks end mid-window and mid-batch; held-back requests must give the same batches.
    # (Random arrivals draw per chunk, so this uses the deterministic uniform process.)
    problem, plan = chain()
    whole = simulate(problem, plan, 12.0, dispatch=dispatch)
    monkeypatch.setattr(sim, "CHUNK_S", 0.7)
    pieces = simulate(problem, plan, 12.0, dispatch=dispatch)
    # Counts are exact; a child arriving exactly on a window boundary may fall on either side by float
    # rounding (chunk-relative arithmetic), so latencies are compared on the worst case only.
    for m in ("a", "b"):
        p, w = pieces.modules[m], whole.modules[m]
        assert (p.requests, p.batches, p.windows, p.overflow_batches) == (
            w.requests,
            w.batches,
            w.windows,
            w.overflow_batches,
        )
        assert p.measured_worst_case_s == pytest.approx(w.measured_worst_case_s, abs=1e-9)
    assert pieces.end_to_end.paths == whole.end_to_end.paths


@pytest.mark.parametrize("arrivals", ["poisson", "bursty"])
def test_random_arrivals_are_seeded(arrivals):
    problem, plan = single(M4, 6.0)
    a = simulate(problem, plan, 20.0, arrivals=arrivals, seed=7, jitter=0.1)
    b = simulate(problem, plan, 20.0, arrivals=arrivals, seed=7, jitter=0.1)
    c = simulate(problem, plan, 20.0, arrivals=arrivals, seed=8, jitter=0.1)
    assert a == b
    assert a != c
    assert 60 <= a.modules["m"].requests <= 200  # 6 req/s over 20 s


def test_rejects_nothing_silently_for_zero_rate_group():
    mp = ModulePlan(
        latency_budget_s=1.0,
        worst_case_latency_s=1.0,
        groups=[MachineGroup(hardware="gpu", batch=2, machines=1, rate_per_machine=0.0, duration_s=0.1)],
    )
    from planner.dispatch import DispatchError

    with pytest.raises(DispatchError):
        build_schedule("m", mp)


def test_join_children_are_spread_at_their_parents_rates():
    # tests/unit/planner/test_robust.py's join: c spreads a1's children at 75 req/s and a2's at 25 req/s
    # (dispatch.spread_rates), worst case 0.08 + 1/75 s. Spreading a1's bursts of 2 at the one smallest
    # rate instead (dispatch.spread_rate, 25 req/s) puts the second 1/25 s later, in the next window:
    # measured above the plan's figure, so the simulator must use the per-parent rates.
    from planner.robust import annotate, realise
    from tests.unit.planner.test_robust import join
    from tests.unit.planner.test_robust import module_plan as robust_module_plan

    problem, plan = join(robust_module_plan((4, 1, 0.04, 1, 100.0), wcl=0.08))
    annotated = annotate(problem, plan, realise(problem, plan))
    figure = annotated.modules["c"].worst_case_latency_s
    assert figure == pytest.approx(0.08 + 1 / 75, rel=1e-5)
    per_parent = simulate(problem, annotated, 20.0).modules["c"]
    assert per_parent.overflow_batches == 0 and per_parent.measured_worst_case_s <= figure + 1e-9
    info = {k: v for k, v in annotated.modules["c"].dispatch.items() if k != "spread_rates"}
    one_rate = annotated.model_copy(
        update={
            "modules": {
                **annotated.modules,
                "c": annotated.modules["c"].model_copy(update={"dispatch": info}),
            }
        }
    )
    assert simulate(problem, one_rate, 20.0).modules["c"].measured_worst_case_s > figure + 1e-3


# --------------------------------------------------------------------------- front admission


def _dispatchable(seed: int) -> tuple[ProblemSpec, Plan]:
    from planner.generate import generate_problem
    from planner.robust import solve_dispatchable

    problem = generate_problem(seed)
    return problem, solve_dispatchable(problem)


def test_without_admission_the_report_counts_no_frames() -> None:
    problem, plan = _dispatchable(6)
    r = simulate(problem, plan, 2.0, "poisson", seed=2)
    assert (r.admission, r.frames_offered, r.frames_shed) == ("none", 0, 0)


def test_planned_caps_keep_the_children_of_a_poisson_root_within_their_plan() -> None:
    # pose-6 under Poisson frames at its planned rate: with its windows capped at its batch (the
    # front before) the detector's batches send the pose module bursts it was not sized for, it falls
    # behind and almost no frame makes the SLO; capped at the plan's counts every admitted frame does,
    # and the rest is shed (early, with a reason) instead of answered late
    problem, plan = _dispatchable(6)
    batch = simulate(problem, plan, 10.0, "poisson", seed=2, admission="batch")
    capped = simulate(problem, plan, 10.0, "poisson", seed=2, admission="planned")
    assert sum(m.overflow_batches for m in batch.modules.values()) > 0
    assert batch.end_to_end.slo_attainment < 0.5
    assert all(m.overflow_batches == 0 for m in capped.modules.values())
    assert capped.end_to_end.slo_attainment == 1.0
    assert capped.admission == "planned"
    rate = problem.modules["detector"].rate
    assert capped.frames_offered == pytest.approx(10.0 * rate, rel=0.1)
    assert 0 < capped.frames_shed < capped.frames_offered / 2
    assert capped.end_to_end.paths > 0


@pytest.mark.parametrize("arrivals", ["poisson", "bursty"])
def test_every_admitted_frame_meets_the_slo_whatever_the_arrivals(arrivals) -> None:
    # generated apps (7, 45, 52 and 66 have a join), dispatch-aware plans, the front's admission
    for seed in (*range(0, 40, 3), 7, 45, 52, 66):
        problem, plan = _dispatchable(seed)
        r = simulate(problem, plan, 6.0, arrivals, seed=seed, admission="planned")
        assert all(m.overflow_batches == 0 for m in r.modules.values()), (seed, problem.name)
        assert r.end_to_end.slo_attainment == 1.0, (seed, problem.name)
        assert r.frames_offered > 0


def test_fronts_that_count_apart_overfill_the_windows_the_plan_capped() -> None:
    # three fronts, each keeping the plan's caps on its own frames only (a Lambda front without the
    # shared counts): a window can take three times its cap, and the children overflow again
    problem, plan = _dispatchable(6)
    shared = simulate(problem, plan, 10.0, "poisson", seed=2, admission="planned")
    apart = simulate(problem, plan, 10.0, "poisson", seed=2, admission="planned", front_instances=3)
    assert (shared.front_instances, apart.front_instances) == (1, 3)
    assert all(m.overflow_batches == 0 for m in shared.modules.values())
    assert sum(m.overflow_batches for m in apart.modules.values()) > 0
    assert apart.end_to_end.slo_attainment < 0.99 and apart.frames_shed < shared.frames_shed
