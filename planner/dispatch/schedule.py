"""The dispatch schedule a front reads: slots, windows, each group's windows, and the periodic schedule."""

from __future__ import annotations

import bisect
import math
from collections.abc import Hashable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, PrivateAttr
from pydantic_core import core_schema

from planner.errors import PlannerError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping


__all__ = ["DispatchError", "DispatchSchedule", "GroupDispatch", "Slot", "Window", "WindowTable"]


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
    theorem1_s: float = Field(description="d + o + b / w (Theorem 1 plus the latency-only overhead o)")
    guarantee_s: float = Field(description="max(Theorem 1, o + d + sum of all groups' batch sizes / W')")
    worst_case_latency_s: float = Field(description="exact steady state: max window + wait + d, plus o")
    overhead_s: float = Field(
        default=0.0, ge=0, exclude_if=lambda v: v == 0, description="o: latency-only hop before the machine"
    )


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
    worst_case_latency_s: float = Field(
        description="exact steady-state bound: window + wait + duration, plus the group's overhead"
    )
    theorem1_s: float = Field(description="max over groups of d + o + b / w (Theorem 1)")

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
            deadline_s=end + g.overhead_s + g.duration_s,
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
