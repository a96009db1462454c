"""Throughput-cost (TC) dispatch from a stateless front: a plan becomes a periodic schedule of time windows.

Every request of a module that arrives inside window ``k`` belongs to one batch, executed by one machine
when the window closes (docs/design.md §4, "time windows"). The front needs no shared counter: it maps the
arrival time to a window with :meth:`DispatchSchedule.slot_at` (a bisect on precomputed offsets).

Construction (docs/dispatch.md has the argument and the measurements):

- A module's groups run ``machines`` machines at ``rate_per_machine`` req/s (dummy load included); the
  planned rate is ``W = sum n_g f_g``. Machine ``i`` needs ``f_i / b_i`` batches per second.
- The schedule repeats with period ``P``. Each machine gets an integer number of windows per period,
  ``N_i = ceil(f_i P / b_i)`` capped at its throughput ``floor(c_i P / d_i)``; ``P`` is chosen (exact
  rational hyperperiod when one exists, else the best multiple of the longest batch interval) so that the
  rounding error is smallest. The effective rate ``W' = sum N_i b_i / P`` is ``>= W`` unless a cap binds.
- A window of machine ``i`` lasts ``b_i / W'``: at the planned rate the batch fills exactly when the window
  closes, and the windows of one period tile ``[0, P)`` exactly.
- The order of windows inside the period is built group by group (machines of one group take turns) with
  earliest-deadline-first among the groups whose machine will be free (up to the group's Theorem-1 slack)
  when the window closes. The steady-state queue wait of every window is then computed exactly (constant
  durations, full windows), so :attr:`DispatchSchedule.worst_case_latency_s` is the schedule's own exact
  bound, to compare with Theorem 1's ``d_i + b_i / w_i``.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections.abc import Hashable, Iterator, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, overload

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, PrivateAttr
from pydantic_core import core_schema

from planner.errors import PlannerError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from planner.models import ModulePlan, Plan

__all__ = [
    "DispatchError",
    "DispatchSchedule",
    "Slot",
    "Window",
    "WindowTable",
    "build_schedule",
    "build_schedules",
    "planned_spread_rate",
    "root_window_caps",
    "rr_pattern",
    "schedule_origin",
    "theorem1_latencies",
]

#: Module plan extra: the module's schedule phase (s after t = 0 of the wall clock, mod its period),
#: chosen by the fleet packer for aligned duty cycles (planner.packing.apply_phases).
PHASE_KEY = "schedule_phase_s"

_EPS = 1e-9
#: Upper bound on windows per period (keeps the schedule small enough to cache and to store).
MAX_WINDOWS = 50_000
#: Largest period (in windows) the eligibility order is tried on; above it the EDF order is kept (it
#: meets the guarantee by construction). On 5 generated 100-app fleets it won 19 times (the largest
#: period 5,991 windows), on the 24 frozen two-group plans of more than 4,096 windows once (11,364);
#: the larger periods (up to 45,000 windows) took most of a cold epoch's schedule time.
ELIGIBLE_MAX_WINDOWS = 16_384
#: Candidate periods searched when the rates have no small exact hyperperiod.
_PERIOD_MULTIPLES = 64
#: Steps between two checks whether a pass of the eligibility order has joined the previous pass.
_SNAP = 32


class DispatchError(PlannerError):
    """A module plan cannot be turned into a dispatch schedule (no machine has a positive rate)."""


class Slot(BaseModel):
    """The batch a request arriving at some time belongs to (absolute times, seconds since the origin)."""

    model_config = ConfigDict(frozen=True)

    module: str
    group: int
    machine: int
    batch_id: int
    window_start_s: float
    window_end_s: float
    batch: int
    deadline_s: float


class Window(BaseModel):
    """One window of the period: offsets in ``[0, period_s)``, the machine that runs its batch and the
    steady-state queue wait of that batch (seconds the machine is still busy when the window closes)."""

    model_config = ConfigDict(frozen=True)

    start_s: float
    end_s: float
    group: int
    machine: int
    wait_s: float = 0.0


_WINDOW_KEYS = ("start_s", "end_s", "group", "machine", "wait_s")


class WindowTable(Sequence[Window]):
    """The windows of one period, stored by column: ``start``, ``end``, ``wait`` (float64) and ``group``,
    ``machine`` (int64) arrays, read-only. A sequence of :class:`Window` (built on access), validated from
    and serialised to the list of window objects, so a schedule's JSON is the list it always was.

    The planner builds thousands of schedules per epoch and reads only their columns (worst cases, burst
    completions); one Python object per window cost more than computing the schedule."""

    __slots__ = ("end", "group", "machine", "start", "wait")

    def __init__(
        self, start: np.ndarray, end: np.ndarray, group: np.ndarray, machine: np.ndarray, wait: np.ndarray
    ) -> None:
        cols = (
            np.array(start, dtype=np.float64),
            np.array(end, dtype=np.float64),
            np.array(group, dtype=np.int64),
            np.array(machine, dtype=np.int64),
            np.array(wait, dtype=np.float64),
        )
        if any(c.ndim != 1 or len(c) != len(cols[0]) for c in cols):
            raise ValueError("window columns must be 1-d arrays of one length")
        for c in cols:
            c.setflags(write=False)
        self.start, self.end, self.group, self.machine, self.wait = cols

    @classmethod
    def of(cls, windows: Iterable[Window | Mapping[str, Any]]) -> WindowTable:
        """A table of windows given as :class:`Window` objects or mappings with its fields."""
        rows = [w if isinstance(w, Window) else Window.model_validate(w) for w in windows]
        return cls(
            np.array([w.start_s for w in rows], dtype=np.float64),
            np.array([w.end_s for w in rows], dtype=np.float64),
            np.array([w.group for w in rows], dtype=np.int64),
            np.array([w.machine for w in rows], dtype=np.int64),
            np.array([w.wait_s for w in rows], dtype=np.float64),
        )

    def __len__(self) -> int:
        return len(self.end)

    @overload
    def __getitem__(self, k: int) -> Window: ...
    @overload
    def __getitem__(self, k: slice) -> list[Window]: ...
    def __getitem__(self, k: int | slice) -> Window | list[Window]:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        return Window.model_construct(
            start_s=float(self.start[k]),
            end_s=float(self.end[k]),
            group=int(self.group[k]),
            machine=int(self.machine[k]),
            wait_s=float(self.wait[k]),
        )

    def __iter__(self) -> Iterator[Window]:
        for s, e, g, m, w in zip(*self.columns(), strict=True):
            yield Window.model_construct(start_s=s, end_s=e, group=g, machine=m, wait_s=w)

    def columns(self) -> tuple[list[float], list[float], list[int], list[int], list[float]]:
        """The columns as Python lists (start, end, group, machine, wait)."""
        return (
            self.start.tolist(),
            self.end.tolist(),
            self.group.tolist(),
            self.machine.tolist(),
            self.wait.tolist(),
        )

    def dump(self) -> list[dict[str, float | int]]:
        """The windows as the list of JSON objects of :class:`Window` (same keys, same order)."""
        return [dict(zip(_WINDOW_KEYS, row, strict=True)) for row in zip(*self.columns(), strict=True)]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, WindowTable):
            return all(
                np.array_equal(a, b)
                for a, b in zip(
                    (self.start, self.end, self.group, self.machine, self.wait),
                    (other.start, other.end, other.group, other.machine, other.wait),
                    strict=True,
                )
            )
        if isinstance(other, Sequence) and not isinstance(other, str):
            return list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((len(self), self.end.tobytes()[-64:]))

    def __repr__(self) -> str:
        return f"WindowTable({len(self)} windows)"

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: object, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        rows = handler.generate_schema(list[Window])
        from_rows = core_schema.chain_schema([rows, core_schema.no_info_plain_validator_function(cls.of)])
        return core_schema.json_or_python_schema(
            json_schema=from_rows,
            python_schema=core_schema.union_schema([core_schema.is_instance_schema(cls), from_rows]),
            serialization=core_schema.plain_serializer_function_ser_schema(_dump_windows),
        )


def _dump_windows(windows: Sequence[Window | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A schedule's windows as JSON objects (a :class:`WindowTable`, or a list put in by ``model_copy``)."""
    if isinstance(windows, WindowTable):
        return windows.dump()
    return [w.model_dump() if isinstance(w, Window) else dict(w) for w in windows]


class GroupDispatch(BaseModel):
    """Per-group figures of a schedule (index = ``ModulePlan.groups`` index)."""

    model_config = ConfigDict(frozen=True)

    batch: int
    concurrency: int
    duration_s: float
    machines: int
    windows_per_machine: int
    window_s: float
    theorem1_s: float = Field(description="d + b / w (Theorem 1)")
    guarantee_s: float = Field(description="max(Theorem 1, d + sum of all groups' batch sizes / W')")
    worst_case_latency_s: float = Field(description="exact steady state: max window + wait + d")


class _Lookup:
    """A schedule's derived tables, each built on its first use (the planner builds thousands of schedules
    per epoch, most only for their figures): the windows' columns as Python lists and, per machine, its
    window ends and indices (:meth:`DispatchSchedule.slot_at`), the groups that have windows and
    per-window arrays. All are rebuilt when the schedule's windows or groups are not the ones they were
    built from. Derived data, so it never makes two schedules unequal."""

    __slots__ = ("arrays", "by_machine", "lists", "memo", "rows", "source", "table", "used")

    def __init__(self) -> None:
        self.source: tuple[object, object] | None = None
        self.table: WindowTable | None = None
        self.rows: tuple[list[float], list[float], list[int], list[int], list[float]] | None = None
        self.by_machine: dict[tuple[int, int], tuple[list[float], list[int]]] | None = None
        self.used: list[int] | None = None
        self.arrays: tuple[np.ndarray, ...] | None = None
        self.lists: tuple[list[float], list[float], list[float], list[float], list[float]] | None = None
        self.memo: dict[Hashable, Any] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Lookup)

    def __hash__(self) -> int:
        return 0

    def of(self, windows: Sequence[Window], groups: list[GroupDispatch]) -> _Lookup:
        src = self.source
        if src is None or src[0] is not windows or src[1] is not groups:
            self.source = (windows, groups)
            self.table = windows if isinstance(windows, WindowTable) else WindowTable.of(windows)
            self.rows = self.by_machine = self.used = self.arrays = self.lists = None
            self.memo = {}
        return self


class DispatchSchedule(BaseModel):
    """A module's periodic window schedule. JSON-serialisable; the lookup tables are built on first use."""

    model_config = ConfigDict(frozen=True)

    module: str
    period_s: float
    windows: WindowTable
    groups: list[GroupDispatch]
    planned_rate: float = Field(description="W: sum of machines * rate_per_machine (dummy included)")
    effective_rate: float = Field(description="W' = sum of batches * batch size per period / period")
    worst_case_latency_s: float = Field(description="exact steady-state bound: window + wait + duration")
    theorem1_s: float = Field(description="max over groups of d + b / w (Theorem 1)")

    _lookup: _Lookup = PrivateAttr(default_factory=_Lookup)

    def _looked_up(self) -> _Lookup:
        # read from pydantic's dict of private attributes: ``self._lookup`` goes through
        # ``BaseModel.__getattr__`` (microseconds, and the planner asks thousands of times per epoch)
        private = self.__pydantic_private__
        lookup: _Lookup = private["_lookup"] if private is not None else self._lookup
        return lookup.of(self.windows, self.groups)

    def _rows(self) -> tuple[list[float], list[float], list[int], list[int], list[float]]:
        lk = self._looked_up()
        if lk.rows is None:
            assert lk.table is not None
            lk.rows = lk.table.columns()
        return lk.rows

    def _machines(self) -> dict[tuple[int, int], tuple[list[float], list[int]]]:
        lk = self._looked_up()
        if lk.by_machine is None:
            t = lk.table
            assert t is not None
            by_machine: dict[tuple[int, int], tuple[list[float], list[int]]] = {}
            if len(t):
                width = int(t.machine.max()) + 1
                key = t.group * width + t.machine
                order = np.argsort(key, kind="stable")  # per machine, its windows in period order
                cuts = np.flatnonzero(np.diff(key[order])) + 1
                for idx, ends in zip(np.split(order, cuts), np.split(t.end[order], cuts), strict=True):
                    k = int(key[idx[0]])
                    by_machine[(k // width, k % width)] = (ends.tolist(), idx.tolist())
            lk.by_machine = by_machine
        return lk.by_machine

    def prepare(self) -> DispatchSchedule:
        """Build the slot lookup tables now (they are built on first use otherwise): a router does
        this when it loads a plan, so its first request does not pay for them."""
        self._rows()
        self._machines()
        return self

    def window_groups(self) -> list[int]:
        """Indices of the groups that have windows, ascending (computed once)."""
        lk = self._looked_up()
        if lk.used is None:
            assert lk.table is not None
            groups = lk.table.group
            # a set of the few groups is cheaper than numpy's sort on the short periods most schedules have
            lk.used = sorted(set(groups.tolist())) if len(groups) <= 4096 else np.unique(groups).tolist()
        return list(lk.used)

    def window_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per window of one period: start, end, queue wait, its group's duration and batch size (float
        arrays, read-only; computed once)."""
        lk = self._looked_up()
        if lk.arrays is None:
            t = lk.table
            assert t is not None
            gs = self.groups
            dur = np.array([g.duration_s for g in gs], dtype=np.float64)[t.group]
            batch = np.array([g.batch for g in gs], dtype=np.float64)[t.group]
            for a in (dur, batch):
                a.setflags(write=False)
            lk.arrays = (t.start, t.end, t.wait, dur, batch)
        start, end, wait, dur, batch = lk.arrays
        return start, end, wait, dur, batch

    def window_lists(self) -> tuple[list[float], list[float], list[float], list[float], list[float]]:
        """:meth:`window_arrays` as Python lists of floats (the same values; computed once): a caller
        that reads a few windows one by one does so faster on lists."""
        lk = self._looked_up()
        if lk.lists is None:
            start, end, wait, dur, batch = self.window_arrays()
            lk.lists = (start.tolist(), end.tolist(), wait.tolist(), dur.tolist(), batch.tolist())
        return lk.lists

    def derived(self) -> dict[Hashable, Any]:
        """A memo for figures computed from this schedule (:func:`planner.robust.required_spread_rate`
        keeps its answers here: a schedule shared by the rounds of a solve and the shapes of a plan is
        asked the same question many times). Emptied, like the lookup tables, when the windows or groups
        are replaced; a key must hold every other input of its figure (other fields included)."""
        return self._looked_up().memo

    def window_wait_s(self, k: int) -> float:
        """Steady-state queue wait of window ``k`` (of one period; ``k`` taken modulo the window count)."""
        waits = self._rows()[4]
        return waits[k % len(waits)]

    def _slot(self, cycle: int, k: int) -> Slot:
        starts, ends, group, machine, _ = self._rows()
        base = cycle * self.period_s
        g = self.groups[group[k]]
        end = base + ends[k]
        return Slot(
            module=self.module,
            group=group[k],
            machine=machine[k],
            batch_id=cycle * len(ends) + k,
            window_start_s=base + starts[k],
            window_end_s=end,
            batch=g.batch,
            deadline_s=end + g.duration_s,
        )

    def slot_at(self, t: float) -> Slot:
        """The batch of a request arriving ``t`` seconds after the schedule origin (windows are
        half-open ``[start, end)``)."""
        if t < 0 or not math.isfinite(t):
            raise ValueError(f"t must be a finite time since the origin, got {t}")
        cycle = int(t // self.period_s)
        ends = self._rows()[1]
        k = bisect.bisect_right(ends, t - cycle * self.period_s)
        if k >= len(ends):  # float rounding at the period boundary
            cycle, k = cycle + 1, 0
        return self._slot(cycle, k)

    def slots_for_machine(self, group: int, machine: int, t_from: float, t_to: float) -> list[Slot]:
        """The batches machine ``(group, machine)`` runs: slots whose window closes in ``[t_from, t_to)``."""
        ends, idx = self._machines().get((group, machine), ([], []))
        out: list[Slot] = []
        if not ends or t_to <= t_from:
            return out
        first = max(0, int(t_from // self.period_s))
        last = int(t_to // self.period_s)
        for cycle in range(first, last + 1):
            base = cycle * self.period_s
            lo = bisect.bisect_left(ends, t_from - base)
            hi = bisect.bisect_left(ends, t_to - base)
            out.extend(self._slot(cycle, idx[j]) for j in range(lo, hi))
        return out


# --------------------------------------------------------------------------- Theorem 1


def theorem1_latencies(module_plan: ModulePlan, prices: Mapping[str, float] | None = None) -> list[float]:
    """Theorem 1 per group: ``d_g + b_g / w_g`` with ``w_g`` the rate of all groups whose throughput-cost
    ratio ``t/p`` is no larger than group ``g``'s. Without ``prices`` the list order is the TC order and
    consecutive groups with the same configuration share ``w``."""
    gs = module_plan.groups
    rates = [g.machines * g.rate_per_machine for g in gs]
    if prices is not None:
        ratio = [
            (g.concurrency * g.batch / g.duration_s if g.duration_s > 0 else math.inf) / prices[g.hardware]
            for g in gs
        ]
        w = [
            sum(r for r, q in zip(rates, ratio, strict=True) if q <= ratio[i] * (1 + _EPS))
            for i in range(len(gs))
        ]
    else:
        key = [(g.hardware, g.batch, g.concurrency, g.duration_s) for g in gs]
        w = []
        for i in range(len(gs)):
            j = i
            while j > 0 and key[j - 1] == key[i]:
                j -= 1
            w.append(sum(rates[j:]))
    return [g.duration_s + g.batch / wi if wi > 0 else math.inf for g, wi in zip(gs, w, strict=True)]


# --------------------------------------------------------------------------- period and counts
#
# Plain Python on a handful of groups: numpy costs microseconds per call on 1-3 element arrays, and the
# period search evaluates up to 65 periods. The figures are the same floats numpy gave (same operations
# in the same order; sums of fewer than 8 terms are sequential in numpy too, longer ones go through it).


def _sum(xs: list[float]) -> float:
    """``np.sum`` of ``xs``, bit for bit (sequential below 8 terms, numpy's pairwise sum above)."""
    if len(xs) >= 8:
        return float(np.sum(np.array(xs, dtype=np.float64)))
    acc = 0.0
    for x in xs:
        acc += x
    return acc


def _floor(x: float) -> float:
    return float(math.floor(x)) if math.isfinite(x) else x


def _counts(
    lam: list[float], cap: list[float], machines: list[int], batch: list[int], period: float
) -> tuple[list[int], int]:
    """Windows per machine per period: ceil(lam * P) capped at the throughput (at least one); a shortfall
    left by the caps is moved to groups with spare throughput, lowest in TC order first. Also returns the
    windows per period before that move, a lower bound on the total that never decreases with ``P``."""
    counts: list[float] = []
    limit: list[float] = []
    for x, c in zip(lam, cap, strict=True):
        hi = _floor(c * period + 1e-7)
        n = max(min(float(math.ceil(x * period - 1e-7)), hi), 1.0)
        counts.append(n)
        limit.append(max(hi, n))
    base = sum(int(n) * m for n, m in zip(counts, machines, strict=True))
    short = _sum([x * period * m * b for x, m, b in zip(lam, machines, batch, strict=True)]) - _sum(
        [n * m * b for n, m, b in zip(counts, machines, batch, strict=True)]
    )
    for g in reversed(range(len(counts))):
        while short > 1e-7 * batch[g] and counts[g] < limit[g]:
            counts[g] += 1
            short -= float(machines[g] * batch[g])
    return [int(n) for n in counts], base


@functools.lru_cache(maxsize=4096)
def _as_fraction(x: float) -> Fraction | None:
    """``x`` as a fraction with denominator <= 10^6, if it is one (to 1e-9 relative)."""
    fr = Fraction(x).limit_denominator(1_000_000)
    if fr <= 0 or abs(float(fr) - x) > 1e-9 * x:
        return None
    return fr


def _rational_period(lam: list[float]) -> float | None:
    """Smallest P with lam * P integral for every group, if the rates are (close to) rationals."""
    acc: Fraction | None = None
    for x in lam:
        fr = _as_fraction(x)
        if fr is None:
            return None
        period = 1 / fr  # P must be a multiple of 1 / lam
        acc = period if acc is None else _lcm_fraction(acc, period)
    return None if acc is None else float(acc)


def _lcm_fraction(a: Fraction, b: Fraction) -> Fraction:
    num = math.lcm(a.numerator * b.denominator, b.numerator * a.denominator)
    return Fraction(num, a.denominator * b.denominator)


def _choose_period(
    lam: list[float], cap: list[float], machines: list[int], batch: list[int]
) -> tuple[float, list[int]]:
    """The period: the exact hyperperiod when it is small enough, else the multiple of the longest batch
    interval with the smallest rate shortfall, then the smallest per-machine rate error, then fewest
    windows.

    The multiples are tried in increasing order and the search stops as soon as no later one can win:
    the windows before the shortfall move (``_counts``'s lower bound) never decrease with the period, so
    once it exceeds :data:`MAX_WINDOWS`, or reaches the window count of a best period that is already
    exact (no shortfall, no error), every later multiple would lose or be skipped. The result is the one
    of the full search."""
    if len(lam) == 1:
        return _choose_period_one(lam[0], cap[0], machines[0], batch[0])
    p_min = max(1.0 / x for x in lam)
    multiples = (p_min * m for m in range(1, _PERIOD_MULTIPLES + 1))  # made as the search reaches them
    exact = _rational_period(lam)
    first: list[float] = []
    if exact is not None and exact * _sum([x * m for x, m in zip(lam, machines, strict=True)]) <= MAX_WINDOWS:
        first.append(exact)
    first_multiple = len(first)
    candidates = itertools.chain(first, multiples)
    if len(lam) < 8:  # sums of fewer than 8 terms are sequential: the evaluation fused in plain loops
        return _best_period_few(lam, cap, machines, batch, candidates, first_multiple)
    best: tuple[tuple[float, float, int], float, list[int]] | None = None
    for pos, period in enumerate(candidates):
        counts, base = _counts(lam, cap, machines, batch, period)
        if best is not None and pos >= first_multiple:
            if base > MAX_WINDOWS or (best[0][:2] == (0.0, 0.0) and base >= best[0][2]):
                break
        total = sum(n * m for n, m in zip(counts, machines, strict=True))
        if total > MAX_WINDOWS and best is not None:
            continue
        ideal = [x * period for x in lam]
        served = sum(n * m * b for n, m, b in zip(counts, machines, batch, strict=True))
        planned = _sum([i * m * b for i, m, b in zip(ideal, machines, batch, strict=True)])
        shortfall = max(0.0, 1.0 - served / planned)
        err = max(abs(n - i) / i for n, i in zip(counts, ideal, strict=True))
        key = (round(shortfall, 12), round(err, 9), total)
        if best is None or key < best[0]:
            best = (key, period, counts)
    assert best is not None
    return best[1], best[2]


def _best_period_few(
    lam: list[float],
    cap: list[float],
    machines: list[int],
    batch: list[int],
    candidates: Iterable[float],
    first_multiple: int,
) -> tuple[float, list[int]]:
    """The loop of :func:`_choose_period` for 2 to 7 groups, with :func:`_counts` inlined and each
    candidate's sums taken in the same pass: the same operations in the same order (a sum of fewer than
    8 terms is sequential from ``0.0``, as :func:`_sum` takes it; the planned requests ``x P m b`` are
    the same products in ``_counts`` and in the key), so the same period and counts."""
    groups = list(zip(lam, cap, machines, batch, strict=True))
    width = range(len(groups) - 1, -1, -1)
    best: tuple[tuple[float, float, int], float, list[int]] | None = None
    for pos, period in enumerate(candidates):
        counts: list[float] = []
        limit: list[float] = []
        ideal: list[float] = []
        base = 0
        planned = have = 0.0
        for x, c, m, b in groups:
            hi = _floor(c * period + 1e-7)
            n = max(min(float(math.ceil(x * period - 1e-7)), hi), 1.0)
            counts.append(n)
            limit.append(max(hi, n))
            base += int(n) * m
            i = x * period
            ideal.append(i)
            planned += i * m * b
            have += n * m * b
        if best is not None and pos >= first_multiple:
            if base > MAX_WINDOWS or (best[0][:2] == (0.0, 0.0) and base >= best[0][2]):
                break
        short = planned - have
        for g in width:  # the shortfall move of _counts
            while short > 1e-7 * batch[g] and counts[g] < limit[g]:
                counts[g] += 1
                short -= float(machines[g] * batch[g])
        whole = [int(n) for n in counts]
        total = served = 0
        for n, m, b in zip(whole, machines, batch, strict=True):
            total += n * m
            served += n * m * b
        if total > MAX_WINDOWS and best is not None:
            continue
        shortfall = max(0.0, 1.0 - served / planned)
        err = max(abs(n - i) / i for n, i in zip(whole, ideal, strict=True))
        key = (round(shortfall, 12), round(err, 9), total)
        if best is None or key < best[0]:
            best = (key, period, whole)
    assert best is not None
    return best[1], best[2]


def _choose_period_one(lam: float, cap: float, machines: int, batch: int) -> tuple[float, list[int]]:
    """:func:`_choose_period` of one group (most schedules), on scalars: the same candidates, the same
    IEEE operations in the same order (a one-term ``_sum`` is ``0.0 + x``, i.e. ``x`` for the positive
    terms here; ``max`` of one error is that error), so the same period and counts."""
    exact = _rational_period([lam])
    first: list[float] = []
    if exact is not None and exact * (lam * machines) <= MAX_WINDOWS:
        first.append(exact)
    p_min = 1.0 / lam
    best: tuple[tuple[float, float, int], float, int] | None = None
    for pos, period in enumerate(
        itertools.chain(first, (p_min * m for m in range(1, _PERIOD_MULTIPLES + 1)))
    ):
        # _counts, one group
        hi = _floor(cap * period + 1e-7)
        n = max(min(float(math.ceil(lam * period - 1e-7)), hi), 1.0)
        limit = max(hi, n)
        base = int(n) * machines
        short = lam * period * machines * batch - n * machines * batch
        while short > 1e-7 * batch and n < limit:
            n += 1
            short -= float(machines * batch)
        count = int(n)
        if best is not None and pos >= len(first):
            if base > MAX_WINDOWS or (best[0][:2] == (0.0, 0.0) and base >= best[0][2]):
                break
        total = count * machines
        if total > MAX_WINDOWS and best is not None:
            continue
        ideal = lam * period
        served = count * machines * batch
        planned = ideal * machines * batch
        shortfall = max(0.0, 1.0 - served / planned)
        err = abs(count - ideal) / ideal
        key = (round(shortfall, 12), round(err, 9), total)
        if best is None or key < best[0]:
            best = (key, period, count)
    assert best is not None
    return best[1], [best[2]]


# --------------------------------------------------------------------------- ordering


class _Group:
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


def _order_edf(groups: list[_Group], period: float) -> list[int]:
    """Windows sorted by their ideal (fluid) end ``(j + 1) * P / N_g``, ties in TC order. With this order
    a window never ends after its ideal end and ends less than the sum of one window of every other group
    before it, so each machine's jitter (hence queue wait) is below that sum."""
    ideal = np.concatenate([_ideal_ends(g, period) for g in groups])
    index = np.concatenate([np.full(g.total, g.index, dtype=np.int64) for g in groups])
    out: list[int] = index[np.lexsort((index, ideal))].tolist()
    return out


def _ideal_ends(g: _Group, period: float) -> np.ndarray:
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


def _ready(g: _Group, k: int, ends: list[float], prev: list[float], period: float) -> float:
    """Time the slot that runs group window ``k`` becomes free (``prev``: the previous pass's ends)."""
    j = k - g.lag
    if j >= 0:
        return ends[j] + g.dur
    if not prev:
        return -math.inf
    q, r = divmod(j, g.total)  # windows of earlier periods (the lag may exceed one period)
    return prev[r] + q * period + g.dur


def _eligible_pass(groups: list[_Group], period: float, dls: list[list[float]], last: _Pass | None) -> _Pass:
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
    eps = _EPS
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
    groups: list[_Group], period: float, dls: list[list[float]], last: _Pass | None
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
    lags, eps, tau, until_snap = [lag0, lag1], _EPS, 0.0, _SNAP
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


def _order_eligible(groups: list[_Group], period: float, passes: int = 4) -> list[int]:
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

    def __init__(self, seq: list[int], groups: list[_Group], period: float) -> None:
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

    def _score(self, groups: list[_Group]) -> None:
        excess = [self.group_wcl[g.index] - (g.dur + g.window + g.slack) for g in groups]
        self.score = (max(0.0, *excess), self.worst)

    @classmethod
    def one_group(cls, g: _Group, period: float) -> _Layout:
        """The layout of a schedule with one group (the only order: its windows in turn), the same
        arrays as ``_Layout(_order_edf([g], period), [g], period)``; in plain Python when it has at
        most :data:`_SMALL_LAYOUT` windows times slots."""
        if g.total * g.conc > _SMALL_LAYOUT or g.total % g.machines:
            return cls(_order_edf([g], period), [g], period)
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
    price) gives the exact TC ratios for Theorem 1; without it the list order is the TC order."""
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
    period, counts = _choose_period(lam, cap, machines, batches)
    eff_rate = sum(n * m * b for n, m, b in zip(counts, machines, batches, strict=True)) / period
    planned = sum(g.machines * g.rate_per_machine for g in gs)

    state = []
    for pos, i in enumerate(active):
        g = gs[i]
        window = g.batch / eff_rate
        slack = max(0.0, t1[i] - g.duration_s - window)
        state.append(
            _Group(
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
    guarantee = {g.index: max(t1[g.index], g.dur + spread) + 1e-9 for g in state}
    lay = (
        _Layout.one_group(state[0], period)
        if len(state) == 1
        else _Layout(_order_edf(state, period), state, period)
    )
    if len(state) > 1 and sum(g.total for g in state) <= ELIGIBLE_MAX_WINDOWS:
        alt = _Layout(_order_eligible(state, period), state, period)
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
                guarantee_s=max(t1[i], g.duration_s + spread),
                worst_case_latency_s=lay.group_wcl.get(i, 0.0),
            )
        )
    return DispatchSchedule(
        module=module,
        period_s=period,
        windows=windows,
        groups=group_info,
        planned_rate=planned,
        effective_rate=eff_rate,
        worst_case_latency_s=lay.worst,
        theorem1_s=max(t1[i] for i in active),
    )


def build_schedules(plan: Plan, prices: Mapping[str, float] | None = None) -> dict[str, DispatchSchedule]:
    """Schedules of every module of a plan."""
    return {name: build_schedule(name, mp, prices) for name, mp in plan.modules.items()}


# --------------------------------------------------------------------------- round-robin baseline


def rr_pattern(module_plan: ModulePlan, max_len: int = 100_000) -> list[tuple[int, int]]:
    """Round-robin per request (the baselines' dispatch): a smooth weighted cycle of ``(group, machine)``
    proportional to the machines' rates. Each machine then collects its own batch at its own rate, so a
    full machine's worst case is ``b / f + d = 2d`` (for c = 1)."""
    weights: list[tuple[int, int, float]] = [
        (gi, m, g.rate_per_machine)
        for gi, g in enumerate(module_plan.groups)
        for m in range(g.machines)
        if g.rate_per_machine > 0
    ]
    if not weights:
        raise DispatchError("no machine has a positive rate")
    f_min = min(w for _, _, w in weights)
    ratios = [Fraction(f / f_min).limit_denominator(1000) for _, _, f in weights]
    den = math.lcm(*(r.denominator for r in ratios))
    exact = all(
        abs(float(r) - f / f_min) <= 1e-9 * f / f_min for r, (_, _, f) in zip(ratios, weights, strict=True)
    )
    if exact and sum(int(r * den) for r in ratios) <= max_len:
        counts = [int(r * den) for r in ratios]
    else:
        total = sum(f for _, _, f in weights)
        counts = [max(1, round(f * max_len / total)) for _, _, f in weights]
    keyed: list[tuple[float, int, int]] = []
    for (gi, m, _), n in zip(weights, counts, strict=True):
        keyed.extend(((k + 0.5) / n, gi, m) for k in range(n))
    keyed.sort()
    return [(gi, m) for _, gi, m in keyed]


# --------------------------------------------------------------------------- spreading bursts


def planned_spread_rate(module_plan: ModulePlan, default: float) -> float:
    """Rate (req/s) at which a burst of this module's requests (the children of one parent batch) is
    dispatched: ``k``-th request at ``arrival + k / rate``. A dispatch-aware plan
    (:func:`planner.robust.solve_dispatchable`) records it as ``dispatch.spread_rate``; other plans use
    ``default`` (the caller's: the simulator its schedule's effective rate, the router the planned rate)."""
    info = (module_plan.model_extra or {}).get("dispatch")
    rate = info.get("spread_rate") if isinstance(info, dict) else None
    return float(rate) if isinstance(rate, int | float) and rate > 0 else default


def root_window_caps(
    module_plan: ModulePlan, schedule: DispatchSchedule, *, has_children: bool = True
) -> list[int]:
    """Frames each window of a root module's schedule may take (one per window of a period, in order).

    Its batch, and for a root with children in a dispatch-aware plan (one that records the root's
    stream rate ``r`` as ``dispatch.spread_rate``) no more than ``ceil(r * length)``: what the
    realisation assumed the window holds when it sized the children for the bursts this window's batch
    sends them (:func:`planner.robust.required_spread_rate`). The front's admission keeps every window
    within it (spilling or shedding the rest), so the children's guarantee holds whatever the arrival
    process; with the batch as the only cap, Poisson frames overflowed the children of 10 of 100
    generated apps in the simulator (docs/dispatch.md, "Admission and the arrival process"). A root
    without children takes its batch: its own machine's figures hold for any window of at most ``b``."""
    start, end, _, _, batch = schedule.window_lists()
    rate = planned_spread_rate(module_plan, 0.0) if has_children else 0.0
    if rate <= 0:
        return [int(b) for b in batch]
    return [
        min(int(b), math.ceil(rate * (e - s0) - _EPS)) for s0, e, b in zip(start, end, batch, strict=True)
    ]


def schedule_origin(app_origin_s: float, module_plan: ModulePlan, period_s: float) -> float:
    """Origin of a module's schedule (epoch seconds): the app's origin, or, when the plan fixes the
    module's phase (``schedule_phase_s``: shares of an aligned instance take turns in a duty cycle),
    the latest time ``<= app_origin_s`` congruent to that phase modulo the schedule period. Fronts and
    workers compute it alike from the deployment, so they agree on every window; the workers of one
    instance then start their batches at the turns the packer chose (on the instance's one clock)."""
    phase = (module_plan.model_extra or {}).get(PHASE_KEY)
    if not isinstance(phase, int | float) or not period_s > 0:
        return app_origin_s
    back = (app_origin_s - float(phase)) % period_s
    if period_s - back <= 1e-9 * period_s:  # float rounding of an exact multiple
        back = 0.0
    return app_origin_s - back
