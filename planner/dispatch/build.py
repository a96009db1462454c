"""A module plan becomes its dispatch schedule: period, window order and each window's steady-state wait."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from planner.dispatch.bounds import theorem1_latencies
from planner.dispatch.order import SequencedGroup, order_edf, order_eligible
from planner.dispatch.period import choose_period
from planner.dispatch.schedule import DispatchError, DispatchSchedule, GroupDispatch, WindowTable

if TYPE_CHECKING:
    from collections.abc import Mapping

    from planner.models import ModulePlan, Plan

__all__ = ["ELIGIBLE_MAX_WINDOWS", "build_schedule", "build_schedules"]

#: Largest period (in windows) the eligibility order is tried on; above it the EDF order is kept (it
#: meets the guarantee by construction). On 5 generated 100-app fleets it won 19 times (the largest
#: period 5,991 windows), on the 24 frozen two-group plans of more than 4,096 windows once (11,364);
#: the larger periods (up to 45,000 windows) took most of a cold epoch's schedule time.
ELIGIBLE_MAX_WINDOWS = 16_384


def _steady_waits(ends: np.ndarray, period: float, dur: float, conc: int) -> np.ndarray:
    """Exact steady-state queue wait of each window of the machines of one group (constant duration,
    round-robin over ``conc`` slots): ``ends[i, m]`` is the end of machine ``m``'s ``i``-th window of the
    period. Looking back ``conc`` periods suffices because a machine's load is <= 1."""
    n, machines = ends.shape
    reps = 2 * conc
    e = (ends[None, :, :] + period * np.arange(reps)[:, None, None]).reshape(reps * n, machines)
    starts = np.empty_like(e)
    for s in range(conc):
        chain = e[s::conc]
        i = np.arange(len(chain))[:, None]
        completion = np.maximum.accumulate(chain - i * dur, axis=0) + (i + 1) * dur
        starts[s::conc] = completion - dur
    wait = (starts - e).reshape(reps, n, machines)[conc:]
    out: np.ndarray = np.maximum(wait.max(axis=0), 0.0)
    return out


#: Largest ``windows * concurrency`` of a one-group schedule laid out in plain Python
#: (:meth:`_Layout.one_group`): numpy costs microseconds per call on the few windows most schedules have.
_SMALL_LAYOUT = 64


def _steady_waits_small(
    ends: list[float], machines: int, period: float, dur: float, conc: int
) -> list[float]:
    """:func:`_steady_waits` in plain Python, for the windows of one group in period order (window ``j``
    on machine ``j mod machines``): the same IEEE operations in the same order, numpy's ``maximum``
    included (``a if a > b else b``), so the same floats."""
    n = len(ends) // machines
    reps = 2 * conc
    shift = [period * r for r in range(reps)]
    out = [0.0] * len(ends)
    for m in range(machines):
        col = [ends[i * machines + m] for i in range(n)]
        e = [x + sh for sh in shift for x in col]  # row r * n + i: window i, ``r`` periods later
        waits = [0.0] * len(e)
        for s in range(conc):
            acc = 0.0
            for k, row in enumerate(range(s, len(e), conc)):
                v = e[row] - k * dur
                acc = v if k == 0 or not acc > v else acc  # np.maximum.accumulate
                waits[row] = ((acc + (k + 1) * dur) - dur) - e[row]
        for i in range(n):
            w = waits[conc * n + i]
            for r in range(conc + 1, reps):
                x = waits[r * n + i]
                w = w if w > x else x
            out[i * machines + m] = w if w > 0.0 else 0.0
    return out


class _Layout:
    """A sequence of windows laid out over the period, with its exact steady-state waits."""

    seq: np.ndarray
    ends: np.ndarray
    starts: np.ndarray
    machine: np.ndarray
    waits: np.ndarray
    group_wcl: dict[int, float]  # per group: its windows' largest worst case
    group_windows: dict[int, int]  # per group: its windows per period
    worst: float  # the largest worst case of any window
    score: tuple[float, float]

    def __init__(self, seq: list[int], groups: list[SequencedGroup], period: float) -> None:
        self.seq = np.array(seq, dtype=np.int64)
        window = np.zeros(max(g.index for g in groups) + 1)
        for g in groups:
            window[g.index] = g.window
        ends = np.cumsum(window[self.seq])
        ends *= period / ends[-1]  # absorb float error: the period is tiled exactly
        self.ends = ends
        self.starts = np.concatenate(([0.0], ends[:-1]))
        self.machine = np.empty(len(seq), dtype=np.int64)
        self.waits = np.zeros(len(seq))
        dur = np.zeros(len(seq))
        for g in groups:
            pos_g = np.flatnonzero(self.seq == g.index)
            self.machine[pos_g] = np.arange(len(pos_g)) % g.machines
            dur[pos_g] = g.dur
            if len(pos_g):  # window j of the group runs on machine j mod n: column m is machine m
                pos = pos_g.reshape(-1, g.machines)
                self.waits[pos] = _steady_waits(ends[pos], period, g.dur, g.conc)
        wcl = (ends - self.starts) + self.waits + dur
        self.group_wcl = {g.index: float(np.max(wcl[self.seq == g.index])) for g in groups}
        self.group_windows = {g.index: int(np.count_nonzero(self.seq == g.index)) for g in groups}
        self.worst = float(np.max(wcl))
        self._score(groups)

    def _score(self, groups: list[SequencedGroup]) -> None:
        excess = [self.group_wcl[g.index] - (g.dur + g.window + g.slack) for g in groups]
        self.score = (max(0.0, *excess), self.worst)

    @classmethod
    def one_group(cls, g: SequencedGroup, period: float) -> _Layout:
        """The layout of a schedule with one group (the only order: its windows in turn), the same
        arrays as ``_Layout(order_edf([g], period), [g], period)``; in plain Python when it has at
        most :data:`_SMALL_LAYOUT` windows times slots."""
        if g.total * g.conc > _SMALL_LAYOUT or g.total % g.machines:
            return cls(order_edf([g], period), [g], period)
        lay = cls.__new__(cls)
        ends: list[float] = []
        acc = 0.0
        for j in range(g.total):  # np.cumsum: sequential
            acc = g.window if j == 0 else acc + g.window
            ends.append(acc)
        scale = period / ends[-1]  # absorb float error: the period is tiled exactly
        ends = [e * scale for e in ends]
        starts = [0.0, *ends[:-1]]
        waits = _steady_waits_small(ends, g.machines, period, g.dur, g.conc)
        wcl = [((e - s) + w) + g.dur for e, s, w in zip(ends, starts, waits, strict=True)]
        lay.seq = np.full(g.total, g.index, dtype=np.int64)
        lay.ends, lay.starts, lay.waits = np.array(ends), np.array(starts), np.array(waits)
        lay.machine = np.arange(g.total, dtype=np.int64) % g.machines
        lay.worst = max(wcl)
        lay.group_wcl = {g.index: lay.worst}
        lay.group_windows = {g.index: g.total}
        lay._score([g])
        return lay


# --------------------------------------------------------------------------- public builders


def build_schedule(
    module: str, module_plan: ModulePlan, prices: Mapping[str, float] | None = None
) -> DispatchSchedule:
    """Turn one module's plan into its periodic window schedule (deterministic). ``prices`` (hardware ->
    price) gives the exact TC ratios for Theorem 1; without it the list order is the TC order.

    The windows, waits and order are device time; a group's latency-only overhead ``o`` (the hop that
    delivers its requests, :attr:`~planner.models.MachineGroup.overhead_s`) delays every request of it by
    the same amount, so it changes no window: it is added to the group's figures (Theorem 1, guarantee,
    worst case) and the schedule's worst case is the largest of them."""
    gs = module_plan.groups
    active = [i for i, g in enumerate(gs) if g.rate_per_machine > 0]
    if not active:
        raise DispatchError(f"module {module!r}: no group has a positive rate")
    t1 = theorem1_latencies(module_plan, prices)
    lam = [gs[i].rate_per_machine / gs[i].batch for i in active]
    # a plan with f > t keeps its rate (the waits then show the overload)
    cap = [
        max(gs[i].concurrency / gs[i].duration_s if gs[i].duration_s > 0 else math.inf, x)
        for i, x in zip(active, lam, strict=True)
    ]
    machines = [gs[i].machines for i in active]
    batches = [gs[i].batch for i in active]
    period, counts = choose_period(lam, cap, machines, batches)
    eff_rate = sum(n * m * b for n, m, b in zip(counts, machines, batches, strict=True)) / period
    planned = sum(g.machines * g.rate_per_machine for g in gs)

    state = []
    for pos, i in enumerate(active):
        g = gs[i]
        window = g.batch / eff_rate
        slack = max(0.0, t1[i] - g.overhead_s - g.duration_s - window)
        state.append(
            SequencedGroup(
                i,
                machines=g.machines,
                count=counts[pos],
                window=window,
                dur=g.duration_s,
                conc=g.concurrency,
                slack=slack,
            )
        )
    # Guarantee per group: max(Theorem 1, d + sum of the batch sizes / W'); the EDF order meets it by
    # construction, the eligibility order is kept only when it meets it too and scores better.
    spread = float(sum(batches)) / eff_rate
    guarantee = {g.index: max(t1[g.index] - gs[g.index].overhead_s, g.dur + spread) + 1e-9 for g in state}
    lay = (
        _Layout.one_group(state[0], period)
        if len(state) == 1
        else _Layout(order_edf(state, period), state, period)
    )
    if len(state) > 1 and sum(g.total for g in state) <= ELIGIBLE_MAX_WINDOWS:
        alt = _Layout(order_eligible(state, period), state, period)
        if alt.score < lay.score and all(alt.group_wcl[i] <= b for i, b in guarantee.items()):
            lay = alt

    windows = WindowTable(lay.starts, lay.ends, lay.seq, lay.machine, lay.waits)
    group_info = []
    for i, g in enumerate(gs):
        group_info.append(
            GroupDispatch(
                batch=g.batch,
                concurrency=g.concurrency,
                duration_s=g.duration_s,
                machines=g.machines,
                windows_per_machine=lay.group_windows.get(i, 0) // g.machines,
                window_s=g.batch / eff_rate,
                theorem1_s=t1[i],
                guarantee_s=max(t1[i], g.overhead_s + g.duration_s + spread),
                worst_case_latency_s=lay.group_wcl[i] + g.overhead_s if i in lay.group_wcl else 0.0,
                overhead_s=g.overhead_s,
            )
        )
    # the layout's worst window, each group's own overhead added (none: the layout's figure as it is)
    worst = (
        lay.worst
        if not any(g.overhead_s for g in gs)
        else max(lay.group_wcl[i] + gs[i].overhead_s for i in lay.group_wcl)
    )
    return DispatchSchedule(
        module=module,
        period_s=period,
        windows=windows,
        groups=group_info,
        planned_rate=planned,
        effective_rate=eff_rate,
        worst_case_latency_s=worst,
        theorem1_s=max(t1[i] for i in active),
    )


def build_schedules(plan: Plan, prices: Mapping[str, float] | None = None) -> dict[str, DispatchSchedule]:
    """Schedules of every module of a plan."""
    return {name: build_schedule(name, mp, prices) for name, mp in plan.modules.items()}
