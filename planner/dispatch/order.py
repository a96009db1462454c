"""The order of the windows inside a period: earliest deadline first, and the eligibility order."""

from __future__ import annotations

import math

import numpy as np

from planner.latency import EPS

__all__ = ["SequencedGroup", "order_edf", "order_eligible"]

#: Steps between two checks whether a pass of the eligibility order has joined the previous pass.
_SNAP = 32


# --------------------------------------------------------------------------- ordering


class SequencedGroup:
    """Sequencing constants of one group: its windows take turns over the group's machines."""

    def __init__(
        self, index: int, *, machines: int, count: int, window: float, dur: float, conc: int, slack: float
    ) -> None:
        self.index = index
        self.machines = machines
        self.conc = conc
        self.total = machines * count  # windows of the group per period
        self.window = window
        self.dur = dur
        self.lag = machines * conc  # same machine and same slot: this many group windows earlier
        self.slack = slack


def order_edf(groups: list[SequencedGroup], period: float) -> list[int]:
    """Windows sorted by their ideal (fluid) end ``(j + 1) * P / N_g``, ties in TC order. With this order
    a window never ends after its ideal end and ends less than the sum of one window of every other group
    before it, so each machine's jitter (hence queue wait) is below that sum."""
    ideal = np.concatenate([_ideal_ends(g, period) for g in groups])
    index = np.concatenate([np.full(g.total, g.index, dtype=np.int64) for g in groups])
    out: list[int] = index[np.lexsort((index, ideal))].tolist()
    return out


def _ideal_ends(g: SequencedGroup, period: float) -> np.ndarray:
    """``(j + 1) * P / N_g`` for the group's windows ``j`` (the same floats as the scalar expression)."""
    out: np.ndarray = np.arange(1, g.total + 1, dtype=np.float64) * period / g.total
    return out


class _Pass:
    """One pass of the eligibility order (groups by position in the list): the sequence, per group the
    ends of its windows, and every :data:`_SNAP` steps a snapshot (running end, windows per group)."""

    def __init__(self, n_groups: int) -> None:
        self.seq: list[int] = []
        self.ends: list[list[float]] = [[] for _ in range(n_groups)]
        self.snaps: list[tuple[float, tuple[int, ...]]] = []

    def snap(self, tau: float) -> tuple[float, tuple[int, ...]]:
        s = (tau, tuple(map(len, self.ends)))
        self.snaps.append(s)
        return s

    def same_ends(self, other: _Pass, lags: list[int]) -> bool:
        """Whether the windows the rest of the pass still reads (the last ``lag`` of every group) end
        where ``other``'s did (the caller has checked the running end and the windows per group)."""
        for ends, o_ends, lag in zip(self.ends, other.ends, lags, strict=True):
            k = len(ends)
            lo = max(0, k - lag)
            if ends[lo:k] != o_ends[lo:k]:
                return False
        return True

    def joins(self, tau: float, last: _Pass | None, pending: int, lags: list[int]) -> bool:
        """Take a snapshot (running end ``tau``); when the pass reads ``last`` no more (``pending`` groups
        still do) and is where ``last`` was at this step, complete it with ``last``'s rest: True."""
        state = self.snap(tau)
        if (
            pending == 0
            and last is not None
            and state == last.snaps[len(self.snaps) - 1]
            and self.same_ends(last, lags)
        ):
            self.finish_as(last)
            return True
        return False

    def finish_as(self, other: _Pass) -> None:
        """Complete this pass with ``other``'s rest (the states agree at the last snapshot)."""
        step = len(self.seq)
        self.seq.extend(other.seq[step:])
        self.snaps.extend(other.snaps[len(self.snaps) :])
        for ends, o_ends in zip(self.ends, other.ends, strict=True):
            ends.extend(o_ends[len(ends) :])


def _ready(g: SequencedGroup, k: int, ends: list[float], prev: list[float], period: float) -> float:
    """Time the slot that runs group window ``k`` becomes free (``prev``: the previous pass's ends)."""
    j = k - g.lag
    if j >= 0:
        return ends[j] + g.dur
    if not prev:
        return -math.inf
    q, r = divmod(j, g.total)  # windows of earlier periods (the lag may exceed one period)
    return prev[r] + q * period + g.dur


def _eligible_pass(
    groups: list[SequencedGroup], period: float, dls: list[list[float]], last: _Pass | None
) -> _Pass:
    """One pass over the period; ``last`` is the previous pass (None: the first, nothing before it).

    Each step takes the earliest deadline among the groups whose slot is free (within the slack) when the
    window would close, else the least late; ties in TC order. Once every group has placed at least
    ``lag`` windows (so no longer reads ``last``) and the state at a snapshot equals ``last``'s at the
    same step (running end, windows per group, ends still read), the rest of the pass is ``last``'s rest
    (the order is a function of that state): it is copied instead of recomputed. Two passes that agree
    at some step agree at every later one, so checking every :data:`_SNAP` steps only finds it later."""
    if len(groups) == 2:
        return _eligible_pass_two(groups, period, dls, last)
    cur = _Pass(len(groups))
    seq, all_ends = cur.seq, cur.ends
    windows = [g.window for g in groups]
    lags = [g.lag for g in groups]
    need = [min(g.lag, g.total) for g in groups]  # windows placed before a group stops reading ``last``
    prev = last.ends if last is not None else [[] for _ in groups]
    order = [p for p, g in enumerate(groups) if g.total > 0]  # groups with windows left, TC order
    base = [_ready(g, 0, [], prev[p], period) - g.slack for p, g in enumerate(groups)]  # ready - slack
    deadline = [d[0] if d else 0.0 for d in dls]
    pending = sum(1 for n in need if n > 0)
    totals = [g.total for g in groups]
    eps = EPS
    tau = 0.0
    for step in range(sum(totals)):
        best, late, best_excess, best_dl = -1, True, 0.0, 0.0
        for p in order:
            excess = base[p] - (tau + windows[p])
            if excess <= eps:
                if late or deadline[p] < best_dl:
                    best, late, best_dl = p, False, deadline[p]
            elif late and (
                best < 0 or excess < best_excess or (excess == best_excess and deadline[p] < best_dl)
            ):
                best, best_excess, best_dl = p, excess, deadline[p]
        ends = all_ends[best]
        tau += windows[best]
        ends.append(tau)
        seq.append(best)
        k = len(ends)
        if k < totals[best]:
            deadline[best] = dls[best][k]
            base[best] = _ready(groups[best], k, ends, prev[best], period) - groups[best].slack
        else:
            order.remove(best)
        if k == need[best]:
            pending -= 1
        if step % _SNAP == _SNAP - 1 and cur.joins(tau, last, pending, lags):
            break
    return cur


def _eligible_pass_two(
    groups: list[SequencedGroup], period: float, dls: list[list[float]], last: _Pass | None
) -> _Pass:
    """:func:`_eligible_pass` of two groups (most schedules with several configurations), the hot loop
    of their construction: each group's state in local variables, the step's choice unrolled (the same
    comparisons in the same order, so the same ties) and ``_ready`` inline for windows past the lag."""
    cur = _Pass(2)
    seq, (ends0, ends1) = cur.seq, cur.ends
    g0, g1 = groups
    w0, w1, tot0, tot1, lag0, lag1 = g0.window, g1.window, g0.total, g1.total, g0.lag, g1.lag
    d0, d1, s0, s1, dls0, dls1 = g0.dur, g1.dur, g0.slack, g1.slack, dls[0], dls[1]
    prev0, prev1 = last.ends if last is not None else ([], [])
    need0, need1 = min(lag0, tot0), min(lag1, tot1)
    base0, base1 = _ready(g0, 0, [], prev0, period) - s0, _ready(g1, 0, [], prev1, period) - s1
    dl0, dl1 = (dls0[0] if dls0 else 0.0), (dls1[0] if dls1 else 0.0)
    alive0, alive1 = tot0 > 0, tot1 > 0
    pending = (need0 > 0) + (need1 > 0)
    lags, eps, tau, until_snap = [lag0, lag1], EPS, 0.0, _SNAP
    for _ in range(tot0 + tot1):
        if alive0 and alive1:
            e0 = base0 - (tau + w0)
            e1 = base1 - (tau + w1)
            if e0 <= eps:
                one = e1 <= eps and dl1 < dl0
            else:
                one = e1 <= eps or e1 < e0 or (e1 == e0 and dl1 < dl0)
        else:
            one = alive1
        if one:
            tau += w1
            ends1.append(tau)
            seq.append(1)
            k = len(ends1)
            if k < tot1:
                dl1 = dls1[k]
                j = k - lag1
                base1 = (ends1[j] + d1 if j >= 0 else _ready(g1, k, ends1, prev1, period)) - s1
            else:
                alive1 = False
            pending -= k == need1
        else:
            tau += w0
            ends0.append(tau)
            seq.append(0)
            k = len(ends0)
            if k < tot0:
                dl0 = dls0[k]
                j = k - lag0
                base0 = (ends0[j] + d0 if j >= 0 else _ready(g0, k, ends0, prev0, period)) - s0
            else:
                alive0 = False
            pending -= k == need0
        until_snap -= 1
        if not until_snap:  # every _SNAP steps
            until_snap = _SNAP
            if cur.joins(tau, last, pending, lags):
                break
    return cur


def order_eligible(groups: list[SequencedGroup], period: float, passes: int = 4) -> list[int]:
    """EDF among the groups whose machine is free (within the group's Theorem-1 slack) when the window
    would close; else the least late. Repeated so the wrap-around state is the previous period's (a pass
    reads the previous pass's ends), until a pass repeats the previous one or after ``passes`` passes."""
    dls: list[list[float]] = [_ideal_ends(g, period).tolist() for g in groups]
    last: _Pass | None = None
    for _ in range(passes):
        cur = _eligible_pass(groups, period, dls, last)
        stable = last is not None and cur.ends == last.ends
        last = cur
        if stable:
            break
    assert last is not None
    return [groups[p].index for p in last.seq]
