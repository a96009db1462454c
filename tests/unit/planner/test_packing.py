"""Fleet packing: co-location condition, checker, exact replay of shared instances, stickiness."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.check import check_plan
from planner.dispatch import build_schedule
from planner.fleet import shape_plan
from planner.generate import generate_problem
from planner.models import MachineGroup, ModulePlan, Plan, ProblemSpec
from planner.packing import (
    ALIGN_GUARD_S,
    FleetPlan,
    Instance,
    PackingError,
    adversarial_phases,
    allowances,
    apply_phases,
    check_fleet,
    colocatable_groups,
    pack,
    plan_shares,
    simulate_instance,
)
from planner.solve import solve

if TYPE_CHECKING:
    from collections.abc import Mapping

Apps = dict[str, tuple[ProblemSpec, Plan]]


def tiny_app(
    name: str, rate: float, batch: int, duration: float, slo: float, hw: str = "cpu"
) -> tuple[ProblemSpec, Plan]:
    """One module ``m`` on one partial machine of ``hw`` (price 1): rate r, batch b, duration d, so its
    worst case is d + b / r (Theorem 1, no dummy)."""
    problem = ProblemSpec(
        name=name,
        slo_s=slo,
        hardware={hw: {"price_per_hour": 1.0}},
        modules={"m": {"rate": rate, "profile": [{"hardware": hw, "batch": batch, "duration_s": duration}]}},
    )
    wcl = duration + batch / rate
    g = MachineGroup(hardware=hw, batch=batch, machines=1, rate_per_machine=rate, duration_s=duration)
    mp = ModulePlan(latency_budget_s=slo, worst_case_latency_s=wcl, groups=[g])
    occ = rate * duration / batch
    plan = Plan(objective="billed", cost_per_hour=occ, billed_per_hour=1.0, solve_ms=0.0, modules={"m": mp})
    return problem, plan


def generated(n: int, seed: int = 0, keep: float = 0.5) -> Apps:
    out = {}
    for i in range(n):
        p = generate_problem(seed * 1000 + i)
        out[f"app{i}"] = (p, shape_plan(p, solve(p), keep=keep))
    return out


def ids(fleet: FleetPlan) -> list[tuple[str, str, int, int]]:
    return sorted(s.ident for i in fleet.instances for s in i.shares)


def content(fleet: FleetPlan) -> list[tuple[str, list[tuple]]]:
    return [(i.slot, sorted(s.key for s in i.shares)) for i in fleet.instances]


# --------------------------------------------------------------------------- the co-location condition


def test_two_tiny_apps_share_one_instance():
    # a: 10 req/s, b 2, d 0.02 -> busy 10 * 0.02 / 2 = 0.1, worst case 0.02 + 0.2 = 0.22 s, slack 0.08 s
    # b: 20 req/s, b 4, d 0.05 -> busy 0.25, worst case 0.05 + 0.2 = 0.25 s, slack 0.05 s
    # together: busy 0.35 <= 1; a waits <= 0.05 <= 0.08, b waits <= 0.02 <= 0.05
    apps = {"a": tiny_app("a", 10, 2, 0.02, 0.3), "b": tiny_app("b", 20, 4, 0.05, 0.3)}
    fleet = pack(apps)
    assert len(fleet.instances) == 1 and fleet.billed_per_hour == 1.0
    waits = {s.app: s.added_wait_s for s in fleet.instances[0].shares}
    assert waits == pytest.approx({"a": 0.05, "b": 0.02})
    assert fleet.dedicated_per_hour == 2.0
    assert fleet.occupancy_per_hour == pytest.approx(0.35)
    assert check_fleet(fleet, apps) == []


def test_no_co_location_without_slack():
    # b's slack is 0.27 - 0.25 = 0.02 s < a's duration 0.03 s: b cannot wait for a
    apps = {"a": tiny_app("a", 10, 2, 0.03, 0.4), "b": tiny_app("b", 20, 4, 0.05, 0.27)}
    fleet = pack(apps)
    assert len(fleet.instances) == 2
    assert all(s.added_wait_s == 0 for i in fleet.instances for s in i.shares)
    assert check_fleet(fleet, apps) == []


def test_no_co_location_above_full_busy():
    # busy 0.6 + 0.5 > 1 even with ample slack
    apps = {"a": tiny_app("a", 30, 1, 0.02, 5.0), "b": tiny_app("b", 25, 1, 0.02, 5.0)}
    assert len(pack(apps).instances) == 2


def test_different_hardware_never_shares():
    apps = {"a": tiny_app("a", 10, 2, 0.02, 1.0, hw="cpu"), "b": tiny_app("b", 10, 2, 0.02, 1.0, hw="gpu")}
    fleet = pack(apps)
    assert sorted(fleet.counts().items()) == [("cpu", 1), ("gpu", 1)]


def test_best_fit_fills_instances():
    # six shares of busy 0.3 and tiny durations: 3 per instance (0.9), two instances
    apps = {f"a{i}": tiny_app(f"a{i}", 30, 1, 0.01, 1.0) for i in range(6)}
    fleet = pack(apps)
    assert sorted(round(i.busy, 6) for i in fleet.instances) == [0.9, 0.9]
    assert check_fleet(fleet, apps) == []


def test_allowance_splits_path_slack_among_co_locatable_modules():
    # chain a -> b, SLO 1.0, worst cases 0.3 + 0.4: slack 0.3 shared by the two modules
    problem = ProblemSpec(
        slo_s=1.0,
        hardware={"cpu": {"price_per_hour": 1.0}},
        modules={
            "a": {"rate": 10, "profile": [{"hardware": "cpu", "batch": 1, "duration_s": 0.2}]},
            "b": {"rate": 10, "profile": [{"hardware": "cpu", "batch": 1, "duration_s": 0.3}]},
        },
        edges=[("a", "b")],
    )
    gs = {
        m: MachineGroup(hardware="cpu", batch=1, machines=1, rate_per_machine=10, duration_s=d)
        for m, d in [("a", 0.2), ("b", 0.3)]
    }
    plan = Plan(
        objective="billed",
        cost_per_hour=0,
        billed_per_hour=2,
        solve_ms=0,
        modules={
            "a": ModulePlan(latency_budget_s=0.3, worst_case_latency_s=0.3, groups=[gs["a"]]),
            "b": ModulePlan(latency_budget_s=0.4, worst_case_latency_s=0.4, groups=[gs["b"]]),
        },
    )
    assert allowances(problem, plan, {"a", "b"}) == pytest.approx({"a": 0.15, "b": 0.15}, abs=1e-8)
    assert allowances(problem, plan, {"b"}) == pytest.approx({"a": 0.0, "b": 0.3}, abs=1e-8)


# --------------------------------------------------------------------------- co-locatable groups


def _mp(*groups: tuple[int, int, float, int, float], **extra: float) -> ModulePlan:
    gs = [
        MachineGroup(hardware="gpu", batch=b, concurrency=c, duration_s=d, machines=n, rate_per_machine=f)
        for b, c, d, n, f in groups
    ]
    return ModulePlan(latency_budget_s=1.0, worst_case_latency_s=0.5, groups=gs, **extra)


@pytest.mark.parametrize(
    ("mp", "model", "want"),
    [
        (_mp((4, 1, 0.1, 3, 25.0)), "tc", {0: 0.5}),  # one group: every machine
        (_mp((4, 1, 0.1, 2, 40.0), (4, 1, 0.1, 1, 10.0)), "tc", {1: 0.5}),  # t = 40, residual t/4
        (_mp((4, 1, 0.1, 2, 40.0), (4, 1, 0.1, 1, 10.0), split_penalty_s=0.04), "tc", {1: 0.46}),
        (_mp((4, 1, 0.1, 2, 40.0), (4, 1, 0.1, 1, 15.0)), "tc", {}),  # 40 / 15 is no integer
        (_mp((4, 1, 0.1, 2, 40.0), (2, 1, 0.05, 1, 10.0)), "tc", {}),  # two configurations
        (_mp((4, 1, 0.1, 2, 30.0), (4, 1, 0.1, 1, 10.0)), "tc", {}),  # first group not full
        (_mp((4, 1, 0.1, 3, 25.0)), "rr", {}),  # round-robin dispatch: no periodic windows
    ],
)
def test_colocatable_groups(mp, model, want):
    assert colocatable_groups(mp, model) == pytest.approx(want)


@pytest.mark.parametrize(("k", "q", "conc"), [(1, 2, 1), (3, 4, 1), (2, 3, 2), (5, 7, 1)])
def test_split_residual_has_one_evenly_spaced_window_per_period(k, q, conc):
    # k full machines (t = c b / d) and one at t / q: the period holds q windows per full machine and one
    # residual window; the full machines meet d + 2 b / W (the multi-group guarantee of the dispatch)
    b, d = 8, 0.04
    t = conc * b / d
    mp = _mp((b, conc, d, k, t), (b, conc, d, 1, t / q))
    s = build_schedule("m", mp)
    res = [w for w in s.windows if w.group == 1]
    assert len(res) == 1
    assert s.period_s == pytest.approx(q * b / t)
    assert s.effective_rate == pytest.approx(k * t + t / q)
    assert s.groups[0].worst_case_latency_s <= d + 2 * b / (k * t + t / q) + 1e-9
    assert s.groups[1].worst_case_latency_s <= d + b / (k * t + t / q) + 1e-9


# --------------------------------------------------------------------------- checker


def test_checker_reports_every_kind_of_error():
    apps = {"a": tiny_app("a", 10, 2, 0.02, 0.3), "b": tiny_app("b", 20, 4, 0.05, 0.3)}
    fleet = pack(apps)
    inst = fleet.instances[0]
    sa, sb = sorted(inst.shares, key=lambda s: s.app)

    def with_instances(*insts: Instance) -> FleetPlan:
        return fleet.model_copy(update={"instances": list(insts)})

    assert any(
        "not placed" in e
        for e in check_fleet(with_instances(Instance(slot="cpu/0", hardware="cpu", shares=[sa])), apps)
    )
    twice = with_instances(inst, Instance(slot="cpu/1", hardware="cpu", shares=[sa]))
    assert any("placed on" in e for e in check_fleet(twice, apps))
    short = with_instances(
        Instance(slot="cpu/0", hardware="cpu", shares=[sa.model_copy(update={"added_wait_s": 0.0}), sb])
    )
    assert any("below the others" in e for e in check_fleet(short, apps))
    late = with_instances(
        Instance(slot="cpu/0", hardware="cpu", shares=[sa, sb.model_copy(update={"added_wait_s": 1.0})])
    )
    assert any("SLO" in e for e in check_fleet(late, apps))
    wrong_hw = with_instances(Instance(slot="gpu/0", hardware="gpu", shares=[sa, sb]))
    assert any("instance" in e for e in check_fleet(wrong_hw, apps))
    wrong_rate = with_instances(
        Instance(slot="cpu/0", hardware="cpu", shares=[sa.model_copy(update={"rate": 99.0}), sb])
    )
    assert any("differs from the plan" in e for e in check_fleet(wrong_rate, apps))
    dup_slot = with_instances(
        Instance(slot="cpu/0", hardware="cpu", shares=[sa]),
        Instance(slot="cpu/0", hardware="cpu", shares=[sb]),
    )
    assert any("used twice" in e for e in check_fleet(dup_slot, apps))


def test_checker_rejects_overfull_and_non_periodic_sharing():
    big = {"a": tiny_app("a", 30, 1, 0.02, 5.0), "b": tiny_app("b", 25, 1, 0.02, 5.0)}
    fleet = pack(big)
    merged = fleet.model_copy(
        update={
            "instances": [
                Instance(
                    slot="cpu/0",
                    hardware="cpu",
                    shares=[
                        s.model_copy(update={"added_wait_s": 0.02}) for i in fleet.instances for s in i.shares
                    ],
                )
            ]
        }
    )
    assert any("busy fractions" in e for e in check_fleet(merged, big))
    rr = {
        a: (p, plan.model_copy(update={"latency_model": "rr"}))
        for a, (p, plan) in {
            "a": tiny_app("a", 10, 2, 0.02, 0.3),
            "b": tiny_app("b", 20, 4, 0.05, 0.3),
        }.items()
    }
    assert len(pack(rr).instances) == 2  # round-robin plans are never co-located
    tc = {"a": tiny_app("a", 10, 2, 0.02, 0.3), "b": tiny_app("b", 20, 4, 0.05, 0.3)}
    assert any("not periodic" in e for e in check_fleet(pack(tc), rr))


def test_conflicting_prices_rejected():
    p, plan = tiny_app("a", 10, 2, 0.02, 0.3)
    p2 = p.model_copy(
        update={"hardware": {"cpu": p.hardware["cpu"].model_copy(update={"price_per_hour": 2.0})}}
    )
    with pytest.raises(PackingError, match="prices"):
        pack({"a": (p, plan), "b": (p2, plan)})


# --------------------------------------------------------------------------- replay of shared instances


def _shared(fleet: FleetPlan) -> list[Instance]:
    return [i for i in fleet.instances if len(i.shares) > 1]


def test_replay_of_packed_instances_stays_within_planned_plus_added_wait():
    # GIVEN generated apps packed into a fleet with shared instances
    apps = generated(40, seed=0)
    fleet = pack(apps)
    shared = _shared(fleet)
    assert shared, "the generated fleet should co-locate something"
    for inst in shared[:4]:
        # WHEN each shared instance is replayed with its shares' real window schedules at random phases
        for seed in range(3):
            for r in simulate_instance(inst, apps, seed=seed, periods=100):
                # THEN every share's measured worst case is within planned + added wait
                assert r.within, r
        # AND with the other shares' batches ready just before a share's: the bound is reached (tight)
        for v in range(len(inst.shares)):
            r = simulate_instance(inst, apps, phases=adversarial_phases(inst, apps, v), periods=20)[v]
            assert r.within, r
            assert r.max_wait_s == pytest.approx(inst.shares[v].added_wait_s, abs=1e-6)


def test_replay_of_hand_made_pair():
    apps = {"a": tiny_app("a", 10, 2, 0.02, 0.3), "b": tiny_app("b", 20, 4, 0.05, 0.3)}
    inst = pack(apps).instances[0]
    for r in simulate_instance(inst, apps, seed=7):
        assert r.within
    a = next(i for i, s in enumerate(inst.shares) if s.app == "a")
    r = simulate_instance(inst, apps, phases=adversarial_phases(inst, apps, a))[a]
    # a's batch: window 0.2 s + wait for b's batch 0.05 s + its own 0.02 s = 0.27 s = 0.22 + 0.05
    assert r.measured_worst_s == pytest.approx(0.27, abs=1e-6)


# --------------------------------------------------------------------------- properties


@st.composite
def fleets(draw) -> Apps:
    n = draw(st.integers(1, 7))
    seeds = draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n, unique=True))
    keep = draw(st.sampled_from([1.0, 0.5, 0.0]))
    out = {}
    for s in seeds:
        p = generate_problem(s)
        out[f"app{s}"] = (p, shape_plan(p, solve(p), keep=keep))
    return out


@given(fleets())
@settings(max_examples=25, deadline=None)
def test_every_machine_placed_once_and_checker_passes(apps: Mapping[str, tuple[ProblemSpec, Plan]]):
    fleet = pack(apps)
    assert check_fleet(fleet, apps) == []
    planned = sorted(s.ident for a, (_, p) in apps.items() for s in plan_shares(a, p))
    assert ids(fleet) == planned
    assert fleet.occupancy_per_hour - 1e-9 <= fleet.billed_per_hour <= fleet.dedicated_per_hour + 1e-9
    assert sum(fleet.counts().values()) == len(fleet.instances)
    assert len({i.slot for i in fleet.instances}) == len(fleet.instances)


@given(fleets(), st.integers(0, 6))
@settings(max_examples=20, deadline=None)
def test_stickiness(apps: Mapping[str, tuple[ProblemSpec, Plan]], drop: int):
    first = pack(apps)
    # the same input again: the same slots with the same content
    assert content(pack(apps, previous=first)) == content(first)
    # an app leaves: every instance without its shares keeps its slot and content
    gone = sorted(apps)[drop % len(apps)]
    rest = {a: v for a, v in apps.items() if a != gone}
    if not rest:
        return
    second = pack(rest, previous=first, repack_threshold=1.0)
    assert check_fleet(second, rest) == []
    after = dict(content(second))
    for slot, keys in content(first):
        if all(k[0] != gone for k in keys):
            assert after.get(slot) == keys


def test_packing_is_deterministic():
    apps = generated(12, seed=4)
    assert content(pack(apps)) == content(pack(dict(reversed(list(apps.items())))))


def test_fresh_packing_replaces_a_fragmented_previous_fleet():
    # previous fleet: six tiny apps alone on six instances; now they fit on two
    apps = {f"a{i}": tiny_app(f"a{i}", 30, 1, 0.01, 1.0) for i in range(6)}
    alone = FleetPlan(
        instances=[
            Instance(slot=f"cpu/{k}", hardware="cpu", shares=[s])
            for k, s in enumerate(plan_shares(a, apps[a][1])[0] for a in sorted(apps))
        ],
        prices={"cpu": 1.0},
        occupancy_per_hour=1.8,
        dedicated_per_hour=6.0,
    )
    fleet = pack(apps, previous=alone)
    assert len(fleet.instances) == 2
    assert {i.slot for i in fleet.instances} <= {f"cpu/{k}" for k in range(6)}  # names reused by overlap
    assert check_fleet(fleet, apps) == []


# --------------------------------------------------------------------------- aligned duty cycles


def _phased(apps: Apps, **kw) -> tuple[FleetPlan, Apps]:
    fleet = pack(apps, align=True, **kw)
    plans = apply_phases(apps, fleet)
    return fleet, {a: (apps[a][0], plans[a]) for a in apps}


def test_aligned_pair_takes_turns_and_waits_for_nothing():
    # a: b 2 at 10 req/s -> one batch every 0.2 s, d 0.02; b: b 4 at 20 req/s -> every 0.2 s, d 0.05
    # cycle 0.2 s: a's turn [0, 0.02), b's [0.0201, 0.0701): 0.0702 <= 0.2, nobody waits
    apps = {"a": tiny_app("a", 10, 2, 0.02, 0.3), "b": tiny_app("b", 20, 4, 0.05, 0.3)}
    fleet, phased = _phased(apps)
    (inst,) = fleet.instances
    assert inst.aligned and inst.cycle_s == pytest.approx(0.2)
    by_app = {s.app: s for s in inst.shares}
    assert by_app["a"].phase_s == 0.0 and by_app["b"].phase_s == pytest.approx(0.02 + ALIGN_GUARD_S)
    assert [s.added_wait_s for s in inst.shares] == [0.0, 0.0]
    assert by_app["a"].fifo_wait_s == pytest.approx(0.05) and by_app["b"].fifo_wait_s == pytest.approx(0.02)
    assert phased["b"][1].modules["m"].model_extra["schedule_phase_s"] == by_app["b"].phase_s
    assert check_fleet(fleet, phased) == []
    # the plans as packed (no phases) do not describe this fleet
    assert any("schedule phase" in e for e in check_fleet(fleet, apps))
    # replay at the packer's phases: no batch waits
    for r in simulate_instance(inst, phased):
        assert r.within and r.max_wait_s < 1e-9 and r.added_wait_s == 0.0
    # phases not honoured: the FIFO bound (the other's duration) still holds, and is reached
    for seed in range(3):
        assert all(r.within for r in simulate_instance(inst, phased, seed=seed, honour_phases=False))
    a = next(i for i, s in enumerate(inst.shares) if s.app == "a")
    r = simulate_instance(inst, phased, phases=adversarial_phases(inst, phased, a))[a]
    assert r.within and r.max_wait_s == pytest.approx(0.05, abs=1e-6)


def test_aligned_co_location_needs_no_slack():
    # FIFO: b's slack 0.02 s < a's duration 0.03 s (two instances); aligned: turns of 0.03 and 0.05 s in
    # a 0.2 s cycle, no added wait, one instance
    apps = {"a": tiny_app("a", 10, 2, 0.03, 0.4), "b": tiny_app("b", 20, 4, 0.05, 0.27)}
    assert len(pack(apps).instances) == 2
    fleet, phased = _phased(apps)
    assert len(fleet.instances) == 1 and fleet.instances[0].aligned
    assert check_fleet(fleet, phased) == []


def test_aligned_cycle_is_the_shortest_interval_and_the_others_speed_up():
    # a every 0.2 s (d 0.02), c every 0.05 s (2 at 40 req/s, d 0.01): cycle 0.05 s, 0.03 + guards <= 0.05;
    # a now runs a batch every 0.05 s: 2 / 0.05 = 40 req/s (30 of them dummy), worst case 0.02 + 0.05
    apps = {"a": tiny_app("a", 10, 2, 0.02, 0.3), "c": tiny_app("c", 40, 2, 0.01, 0.3)}
    fleet, phased = _phased(apps)
    (inst,) = fleet.instances
    assert inst.cycle_s == pytest.approx(0.05)
    plan_a = phased["a"][1]
    g = plan_a.modules["m"].groups[0]
    assert g.rate_per_machine == pytest.approx(40.0) and plan_a.modules["m"].dummy_rate == pytest.approx(30)
    assert check_plan(*phased["a"]) == [] and check_fleet(fleet, phased) == []
    assert fleet.occupancy_per_hour == pytest.approx(40 * 0.02 / 2 + 40 * 0.01 / 2)
    for r in simulate_instance(inst, phased):
        assert r.within and r.max_wait_s < 1e-9


def test_aligned_turns_must_fit_the_cycle():
    # d 0.12 + 0.1 > 0.2: no common cycle; FIFO: busy 0.6 + 0.5 > 1 as well
    apps = {"a": tiny_app("a", 10, 2, 0.12, 5.0), "b": tiny_app("b", 20, 4, 0.1, 5.0)}
    fleet, phased = _phased(apps)
    assert len(fleet.instances) == 2 and not any(i.aligned for i in fleet.instances)
    assert check_fleet(fleet, phased) == []


def test_checker_rejects_broken_turns():
    apps = {"a": tiny_app("a", 10, 2, 0.02, 0.3), "b": tiny_app("b", 20, 4, 0.05, 0.3)}
    fleet, phased = _phased(apps)
    inst = fleet.instances[0]
    # b's turn moved onto a's: the turns overlap (and b's plan no longer has the share's phase)
    moved = [s.model_copy(update={"phase_s": 0.01}) if s.app == "b" else s for s in inst.shares]
    bad = fleet.model_copy(update={"instances": [inst.model_copy(update={"shares": moved})]})
    errors = check_fleet(bad, phased)
    assert any("turn ends" in e for e in errors) and any("schedule phase" in e for e in errors)
    # a cycle the shares do not run at
    other = fleet.model_copy(update={"instances": [inst.model_copy(update={"cycle_s": 0.1})]})
    assert any("batch interval" in e for e in check_fleet(other, phased))
    # a FIFO bound understated
    low = [s.model_copy(update={"fifo_wait_s": 0.0}) for s in inst.shares]
    under = fleet.model_copy(update={"instances": [inst.model_copy(update={"shares": low})]})
    assert any("fifo_wait_s" in e for e in check_fleet(under, phased))


def test_aligned_generated_fleet_checks_and_replays():
    # GIVEN generated apps shaped with no slack kept, packed with aligned duty cycles
    apps = generated(30, seed=1, keep=0.0)
    fleet, phased = _phased(apps)
    aligned = [i for i in fleet.instances if i.aligned]
    assert aligned, "some one-machine modules should take turns"
    # THEN the fleet and every plan check, and never cost more than FIFO-only packing of the same plans
    assert check_fleet(fleet, phased) == []
    for a, (p, plan) in phased.items():
        assert check_plan(p, plan) == [], a
    assert fleet.billed_per_hour <= pack(apps).billed_per_hour + 1e-9
    for inst in aligned[:4]:
        # AND at the packer's phases no batch waits; at random phases the FIFO bound holds
        for r in simulate_instance(inst, phased, periods=50):
            assert r.within and r.max_wait_s < 1e-9, r
        for r in simulate_instance(inst, phased, periods=50, seed=3, honour_phases=False):
            assert r.within, r
    # AND the same input gives the same fleet; the previous fleet is kept
    assert content(pack(apps, align=True)) == content(fleet)
    assert content(pack(apps, align=True, previous=fleet)) == content(fleet)
    with pytest.raises(ValueError, match="guard_s"):
        pack(apps, align=True, guard_s=-1.0)


def test_aligned_share_picks_a_smaller_batch_for_a_shorter_cycle():
    # a: 10 req/s planned at b 4 (d 0.09 s, every 0.4 s; worst case 0.49 s), also profiled at b 1 (d 0.03 s)
    # c: every 0.1 s, d 0.05 s. Cycle 0.1 s: a at b 4 needs 0.09 + 0.05 > 0.1; at b 1 (>= 10 x 0.1 requests
    # per batch) 0.03 + 0.05 + guards <= 0.1 and its worst case 0.03 + 0.1 <= 0.49 (Nexus's merge)
    problem = ProblemSpec(
        name="a",
        slo_s=1.0,
        hardware={"cpu": {"price_per_hour": 1.0}},
        modules={
            "m": {
                "rate": 10,
                "profile": [
                    {"hardware": "cpu", "batch": 4, "duration_s": 0.09},
                    {"hardware": "cpu", "batch": 1, "duration_s": 0.03},
                ],
            }
        },
    )
    g = MachineGroup(hardware="cpu", batch=4, machines=1, rate_per_machine=10, duration_s=0.09)
    mp = ModulePlan(latency_budget_s=1.0, worst_case_latency_s=0.49, groups=[g])
    plan = Plan(objective="billed", cost_per_hour=0.225, billed_per_hour=1.0, solve_ms=0.0, modules={"m": mp})
    apps = {"a": (problem, plan), "c": tiny_app("c", 20, 2, 0.05, 0.2)}
    assert len(pack(apps).instances) == 2  # FIFO: busy 0.225 + 0.5, but c cannot wait 0.09 s
    fleet, phased = _phased(apps)
    (inst,) = fleet.instances
    a = next(s for s in inst.shares if s.app == "a")
    assert inst.cycle_s == pytest.approx(0.1) and (a.batch, a.duration_s) == (1, 0.03)
    assert a.rate == pytest.approx(10.0) and a.busy == pytest.approx(0.3)
    assert phased["a"][1].modules["m"].groups[0].batch == 1
    assert check_fleet(fleet, phased) == [] and check_plan(*phased["a"]) == []
    for r in simulate_instance(inst, phased):
        assert r.within and r.max_wait_s < 1e-9
