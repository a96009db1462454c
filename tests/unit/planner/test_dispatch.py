"""Dispatch schedule: windows tile time, shares match rates, machines are free, slot_at maps times."""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.dispatch import DispatchSchedule, build_schedule, build_schedules, rr_pattern, theorem1_latencies
from planner.dispatch import build as dispatch_build
from planner.dispatch import order as dispatch_order
from planner.dispatch import period as dispatch_period
from planner.models import MachineGroup, ModulePlan, Plan

GPU = "gpu"


def module_plan(*groups: tuple[int, int, float, int, float]) -> ModulePlan:
    """groups: (batch, concurrency, duration_s, machines, rate_per_machine), in TC order."""
    gs = [
        MachineGroup(hardware=GPU, batch=b, concurrency=c, duration_s=d, machines=n, rate_per_machine=f)
        for b, c, d, n, f in groups
    ]
    return ModulePlan(latency_budget_s=10.0, worst_case_latency_s=10.0, groups=gs)


# Harpagon's M4 (§III-B): A, B batch 6, d = 2.0 at 3 req/s each; C batch 2, d = 1.0 at 2 req/s; W = 8.
M4 = module_plan((6, 1, 2.0, 2, 3.0), (2, 1, 1.0, 1, 2.0))


def theorem1(mp: ModulePlan) -> list[float]:
    """The test's own Theorem 1 (groups listed in strictly decreasing TC order): d_g + b_g / w_g."""
    rates = [g.machines * g.rate_per_machine for g in mp.groups]
    return [g.duration_s + g.batch / sum(rates[i:]) for i, g in enumerate(mp.groups)]


def test_m4_theorem1_figures():
    # A, B: 2.0 + 6/8 = 2.75; C: 1.0 + 2/2 = 2.0
    assert theorem1_latencies(M4) == pytest.approx([2.75, 2.0])
    assert theorem1(M4) == pytest.approx([2.75, 2.0])


def test_m4_schedule_windows_and_worst_case():
    s = build_schedule("m4", M4)
    # Period 2 s: A and B one batch each (3 req/s / 6), C two (2 req/s / 2). Windows b / W: 6/8 = 0.75 s
    # for A and B, 2/8 = 0.25 s for C. Ordered by ideal end (A, C at 1 s; B, C at 2 s):
    # A [0, 0.75)  C [0.75, 1.0)  B [1.0, 1.75)  C [1.75, 2.0)
    assert s.period_s == pytest.approx(2.0)
    got = [(w.group, w.machine, round(w.start_s, 9), round(w.end_s, 9)) for w in s.windows]
    assert got == [(0, 0, 0.0, 0.75), (1, 0, 0.75, 1.0), (0, 1, 1.0, 1.75), (1, 0, 1.75, 2.0)]
    # A closes at 0.75 and again at 2.75: free after 2.0 s. C closes at 1.0 and 2.0: free after 1.0 s.
    assert all(w.wait_s == 0.0 for w in s.windows)
    # TC worst case: A/B 0.75 + 2.0 = 2.75 (Theorem 1); C 0.25 + 1.0 = 1.25 (below Theorem 1's 2.0)
    assert s.worst_case_latency_s == pytest.approx(2.75)
    assert [g.worst_case_latency_s for g in s.groups] == pytest.approx([2.75, 1.25])


@pytest.mark.parametrize(
    ("t", "group", "machine", "batch_id", "start", "end", "deadline"),
    [
        (0.0, 0, 0, 0, 0.0, 0.75, 2.75),  # A's first window; deadline 0.75 + 2.0
        (0.8, 1, 0, 1, 0.75, 1.0, 2.0),  # C: 1.0 + 1.0
        (1.0, 0, 1, 2, 1.0, 1.75, 3.75),  # half-open windows: 1.0 starts B's window
        (2.3, 0, 0, 4, 2.0, 2.75, 4.75),  # second period: batch id 1 * 4 + 0
        (7.9, 1, 0, 15, 7.75, 8.0, 9.0),  # cycle 3: 3 * 4 + 3 = 15
    ],
)
def test_m4_slot_at(t, group, machine, batch_id, start, end, deadline):
    slot = build_schedule("m4", M4).slot_at(t)
    assert (slot.module, slot.group, slot.machine, slot.batch_id) == ("m4", group, machine, batch_id)
    assert (slot.window_start_s, slot.window_end_s, slot.deadline_s) == pytest.approx((start, end, deadline))
    assert slot.batch == M4.groups[group].batch


def test_slot_at_rejects_negative_time():
    with pytest.raises(ValueError, match="finite"):
        build_schedule("m4", M4).slot_at(-1.0)


def test_schedule_is_deterministic_and_json_round_trips():
    a, b = build_schedule("m4", M4), build_schedule("m4", M4)
    assert a.model_dump() == b.model_dump()
    loaded = DispatchSchedule.model_validate_json(a.model_dump_json())
    for t in (0.1, 0.9, 3.3, 1234.56):
        assert loaded.slot_at(t) == a.slot_at(t)
    plan = Plan(objective="billed", cost_per_hour=1.0, billed_per_hour=3.0, solve_ms=0.0, modules={"m4": M4})
    assert build_schedules(plan)["m4"].model_dump() == a.model_dump()


def test_slots_for_machine_agree_with_slot_at():
    s = build_schedule("m4", M4)
    slots = s.slots_for_machine(1, 0, 0.0, 6.0)  # C: two windows per 2 s period, ends in [0, 6)
    # C's windows close at 1.0 and 2.0 in each 2 s period; 6.0 is excluded (half-open range)
    assert [sl.window_end_s for sl in slots] == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0])
    assert [sl.batch_id for sl in slots] == [1, 3, 5, 7, 9]
    for sl in slots:
        assert s.slot_at(sl.window_start_s) == sl
    assert s.slots_for_machine(0, 1, 0.0, 0.0) == []


# --------------------------------------------------------------------------- properties over random plans


@st.composite
def plans(draw, max_groups: int = 3) -> ModulePlan:
    """Random small plans with f <= t, groups in decreasing throughput (TC order at equal prices)."""
    n = draw(st.integers(1, max_groups))
    groups = []
    for _ in range(n):
        b = draw(st.sampled_from([1, 2, 4, 8, 16]))
        c = draw(st.sampled_from([1, 1, 2, 3]))
        d = draw(st.sampled_from([0.02, 0.05, 0.1, 0.125, 0.2, 0.25, 0.3, 0.32]))
        t = c * b / d
        load = draw(st.sampled_from([1.0, 1.0, 0.75, 0.5, 0.3]))
        machines = draw(st.integers(1, 4)) if load == 1.0 else 1
        groups.append((t, (b, c, d, machines, t * load)))
    groups.sort(key=lambda x: -x[0])
    ts = [t for t, _ in groups]
    if len(set(ts)) != len(ts):  # keep the TC order strict so the test's Theorem 1 is unambiguous
        groups = groups[:1]
    return module_plan(*(g for _, g in groups))


def brute_force_waits(s: DispatchSchedule, mp: ModulePlan, periods: int = 8) -> dict[int, float]:
    """Max queue wait per window index over the last periods, by an event simulation with a heap of slot
    free times per machine (earliest free slot), independent of the schedule's own computation."""
    free: dict[tuple[int, int], list[float]] = {}
    out: dict[int, float] = {}
    k_len = len(s.windows)
    for p in range(periods):
        for k, w in enumerate(s.windows):
            g = mp.groups[w.group]
            slots = free.setdefault((w.group, w.machine), [-math.inf] * g.concurrency)
            end = p * s.period_s + w.end_s
            start = max(end, heapq.heappop(slots))
            heapq.heappush(slots, start + g.duration_s)
            if p >= periods // 2:
                out[k] = max(out.get(k, 0.0), start - end)
    assert len(out) == k_len
    return out


@settings(max_examples=60, deadline=None)
@given(plans())
def test_windows_tile_the_period(mp):
    s = build_schedule("m", mp)
    assert s.windows[0].start_s == 0.0
    assert s.windows[-1].end_s == pytest.approx(s.period_s, abs=1e-12)
    for a, b in zip(s.windows, s.windows[1:], strict=False):
        assert b.start_s == a.end_s
    for w in s.windows:  # every window lasts b / W' (W' >= W unless a throughput cap binds)
        assert w.end_s - w.start_s == pytest.approx(mp.groups[w.group].batch / s.effective_rate, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(plans())
def test_each_machine_share_matches_its_rate(mp):
    s = build_schedule("m", mp)
    for gi, g in enumerate(mp.groups):
        for m in range(g.machines):
            n = sum(1 for w in s.windows if (w.group, w.machine) == (gi, m))
            rate = n * g.batch / s.period_s  # capacity handed to the machine, req/s
            throughput = g.concurrency * g.batch / g.duration_s
            assert rate <= throughput * (1 + 1e-9)  # never above what the machine can run
            # at most one window per period away from the planned rate
            assert abs(rate - g.rate_per_machine) <= g.batch / s.period_s + 1e-9


@settings(max_examples=60, deadline=None)
@given(plans())
def test_reported_waits_are_exact_and_bounded(mp):
    s = build_schedule("m", mp)
    brute = brute_force_waits(s, mp)
    for k, w in enumerate(s.windows):
        assert w.wait_s == pytest.approx(brute[k], abs=1e-9)
    t1 = theorem1(mp)
    spread = sum(g.batch for g in mp.groups) / s.effective_rate
    for gi, g in enumerate(s.groups):
        # guarantee: max(Theorem 1, d + sum of batch sizes / W')
        assert g.worst_case_latency_s <= max(t1[gi], g.duration_s + spread) + 1e-9


@settings(max_examples=60, deadline=None)
@given(plans(max_groups=1))
def test_single_group_meets_theorem1_and_machines_are_free(mp):
    # One configuration: w = W, windows b / W, each machine's windows are n_g windows apart.
    s = build_schedule("m", mp)
    assert s.worst_case_latency_s <= theorem1(mp)[0] + 1e-9
    g = mp.groups[0]
    for m in range(g.machines):
        ends = [p * s.period_s + w.end_s for p in range(3) for w in s.windows if w.machine == m]
        # no window closes before the slot that runs it (c batches earlier) is free again
        assert all(b - a >= g.duration_s - 1e-9 for a, b in zip(ends, ends[g.concurrency :], strict=False))


def test_rr_pattern_weights_machines_by_rate():
    pat = rr_pattern(M4)
    # 3 : 3 : 2 requests per cycle for A, B, C
    assert len(pat) == 8
    assert sorted(pat.count(x) for x in {(0, 0), (0, 1), (1, 0)}) == [2, 3, 3]


def test_schedule_origin_honours_a_module_phase():
    from planner.dispatch import schedule_origin

    g = MachineGroup(hardware="cpu", batch=2, machines=1, rate_per_machine=10.0, duration_s=0.02)
    plain = ModulePlan(latency_budget_s=1.0, worst_case_latency_s=0.22, groups=[g])
    phased = plain.model_copy(update={"schedule_phase_s": 0.05})
    assert schedule_origin(1000.33, plain, 0.2) == 1000.33
    # the latest time <= 1000.33 congruent to 0.05 mod 0.2: 1000.25
    assert schedule_origin(1000.33, phased, 0.2) == pytest.approx(1000.25)
    assert schedule_origin(1000.25, phased, 0.2) == pytest.approx(1000.25)


# --------------------------------------------------------------------------- frozen schedules (speed-ups)

FROZEN = Path(__file__).parent / "data" / "dispatch_frozen.json"


def frozen_plan(groups: list[list[object]]) -> ModulePlan:
    gs = [
        MachineGroup(hardware=h, batch=b, concurrency=c, duration_s=d, machines=n, rate_per_machine=f)
        for h, b, c, d, n, f in groups
    ]
    return ModulePlan(latency_budget_s=10.0, worst_case_latency_s=10.0, groups=gs)


def frozen_figures(case: dict[str, object]) -> dict[str, object]:
    s = build_schedule(case["module"], frozen_plan(case["groups"]), case["prices"])
    return {
        "windows": len(s.windows),
        "period_s": s.period_s,
        "effective_rate": s.effective_rate,
        "worst_case_latency_s": s.worst_case_latency_s,
        "sha256": hashlib.sha256(s.model_dump_json().encode()).hexdigest(),
    }


def test_schedules_are_bit_identical_to_the_frozen_ones():
    # 334 module plans (a cold 100-app epoch's, the largest up to 45,437 windows, and seeded random ones with
    # non-rational rates and binding caps), built before the speed-up: every window, wait, period, rate and
    # worst case is the same float (the digest covers the whole schedule's JSON).
    cases = json.loads(FROZEN.read_text())["cases"]
    assert len(cases) > 300
    assert max(c["windows"] for c in cases) > 40_000
    assert sum(1 for c in cases if len(c["groups"]) > 1) > 150
    mismatched = []
    for case in cases:
        got = frozen_figures(case)
        want = {k: case[k] for k in got}
        if got != want:
            mismatched.append((case["module"], case["origin"], got, want))
    assert not mismatched, mismatched[:3]


def exhaustive_period(lam, cap, machines, batch, early_stop=False):
    """The period search evaluated through ``_counts`` (sums of floats through ``dispatch_period._sum``, numpy's
    order, which the module uses): every candidate, the smallest key kept; with ``early_stop``, stopping
    where :func:`planner.dispatch.period.choose_period` stops (the search as written before its one- and
    few-group loops were fused)."""
    p_min = max(1.0 / x for x in lam)
    candidates = [p_min * m for m in range(1, dispatch_period._PERIOD_MULTIPLES + 1)]
    exact = dispatch_period._rational_period(lam)
    if (
        exact is not None
        and exact * dispatch_period._sum([x * m for x, m in zip(lam, machines, strict=True)])
        <= dispatch_period.MAX_WINDOWS
    ):
        candidates.insert(0, exact)
    multiples_from = len(candidates) - dispatch_period._PERIOD_MULTIPLES
    best = None
    for pos, period in enumerate(candidates):
        counts, base = dispatch_period._counts(lam, cap, machines, batch, period)
        if early_stop and best is not None and pos >= multiples_from:
            if base > dispatch_period.MAX_WINDOWS or (best[0][:2] == (0.0, 0.0) and base >= best[0][2]):
                break
        total = sum(n * m for n, m in zip(counts, machines, strict=True))
        if total > dispatch_period.MAX_WINDOWS and best is not None:
            continue
        ideal = [x * period for x in lam]
        served = sum(n * m * b for n, m, b in zip(counts, machines, batch, strict=True))
        planned = dispatch_period._sum([i * m * b for i, m, b in zip(ideal, machines, batch, strict=True)])
        shortfall = max(0.0, 1.0 - served / planned)
        err = max(abs(n - i) / i for n, i in zip(counts, ideal, strict=True))
        key = (round(shortfall, 12), round(err, 9), total)
        if best is None or key < best[0]:
            best = (key, period, counts)
    return best[1], best[2]


@st.composite
def period_inputs(draw):
    n = draw(st.integers(1, 4))
    lam, cap, machines, batch = [], [], [], []
    for _ in range(n):
        d = draw(st.one_of(st.sampled_from([0.01, 0.02, 0.025, 0.05, 0.125]), st.floats(0.003, 0.5)))
        c = draw(st.sampled_from([1, 2, 3]))
        b = draw(st.sampled_from([1, 2, 4, 8, 32]))
        load = draw(st.sampled_from([1.0, 1.0, 0.5, 0.3]) | st.floats(0.05, 1.0))
        lam.append(c / d * load)
        cap.append(c / d)
        machines.append(draw(st.integers(1, 600)))
        batch.append(b)
    return lam, cap, machines, batch


@settings(max_examples=200, deadline=None)
@given(period_inputs())
def test_period_search_stops_early_without_changing_the_choice(args):
    # the stop relies on the windows before the shortfall move never decreasing with the period
    assert dispatch_period.choose_period(*args) == exhaustive_period(*args)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(1e-6, 1e6) | st.integers(1, 10**6).map(float), min_size=1, max_size=20))
def test_small_sums_are_numpys(xs):
    assert dispatch_period._sum(xs) == float(np.sum(np.array(xs)))


def test_eligibility_passes_join_the_previous_one_exactly(monkeypatch):
    # The largest frozen plan (two full groups, 45,437 windows per exact hyperperiod): its second pass is
    # the first shifted by a step, the third joins the second within a few snapshots and copies the rest.
    # Copying gives what computing every step gives (and the frozen schedule).
    case = max(json.loads(FROZEN.read_text())["cases"], key=lambda c: c["windows"])
    joined = []
    finish_as = dispatch_order._Pass.finish_as

    def spy(self, other):
        joined.append(len(self.seq))
        finish_as(self, other)

    monkeypatch.setattr(dispatch_order._Pass, "finish_as", spy)
    monkeypatch.setattr(
        dispatch_build, "ELIGIBLE_MAX_WINDOWS", dispatch_period.MAX_WINDOWS
    )  # tried on this period too
    fast = frozen_figures(case)
    assert joined and joined[0] < case["windows"] // 10
    monkeypatch.setattr(dispatch_order, "_SNAP", 10**9)  # never checks: every pass computed step by step
    joined.clear()
    assert frozen_figures(case) == fast == {k: case[k] for k in fast}
    assert not joined


def test_large_periods_keep_the_edf_order_without_trying_the_eligibility_order(monkeypatch):
    # Above ELIGIBLE_MAX_WINDOWS the EDF order is kept as is (it meets every group's guarantee by
    # construction); the frozen figures of those plans are unchanged (the eligibility order lost there).
    cases = json.loads(FROZEN.read_text())["cases"]
    large = [c for c in cases if c["windows"] > dispatch_build.ELIGIBLE_MAX_WINDOWS and len(c["groups"]) > 1]
    assert len(large) >= 5
    calls = []
    eligible = dispatch_build.order_eligible
    monkeypatch.setattr(
        dispatch_build, "order_eligible", lambda *a, **k: calls.append(1) or eligible(*a, **k)
    )
    for case in large[:5]:
        s = build_schedule(case["module"], frozen_plan(case["groups"]), case["prices"])
        assert all(g.worst_case_latency_s <= g.guarantee_s + 1e-9 for g in s.groups if g.machines)
        assert frozen_figures(case) == {k: case[k] for k in frozen_figures(case)}
    assert not calls


def refreeze() -> None:
    """Rewrite the frozen figures with the current code (only after an intended change of schedules)."""
    doc = json.loads(FROZEN.read_text())
    for case in doc["cases"]:
        case.update(frozen_figures(case))
    lines = ",\n".join("  " + json.dumps(c, separators=(",", ":")) for c in doc["cases"])
    FROZEN.write_text('{"about": ' + json.dumps(doc["about"]) + ',\n "cases": [\n' + lines + "\n ]}\n")


if __name__ == "__main__" and sys.argv[1:] == ["--refreeze"]:
    refreeze()
