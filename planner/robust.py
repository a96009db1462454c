"""Dispatch-aware planning: plans whose worst-case figures are what the time-window dispatch realises.

:func:`planner.solve.solve` plans under Theorem 1 (``d + b / w`` per machine). The time-window dispatch
of :mod:`planner.dispatch` realises that bound for a root module with one configuration under uniform
arrivals, but not in general (docs/dispatch.md, "What the dispatch realises"):

- **several configurations**: contiguous windows cannot always give every machine Theorem 1; the
  schedule's own exact steady-state bound (:attr:`DispatchSchedule.worst_case_latency_s`) can be larger;
- **bursts**: the children of one parent batch appear at once and are dispatched ``1 / rho_p`` apart
  (``rho_p`` = the child's spread rate for that parent, at most its capacity rate ``min(W, W')``), so
  the last of a burst of ``n`` waits ``(n - 1) / rho_p`` more than a uniform arrival;
- **overlapping bursts**: a burst still being spread when the next parent batch completes makes the two
  share windows, a window then receives more than its batch and the machine falls behind. The spread is
  stateless (any worker, no shared counter), so the only protection is capacity: a spread rate of at
  least the parent's required rate (the largest burst over the time to the next parent completion,
  from the parent's exact periodic completion pattern) keeps one parent's requests ``1 / rho_p`` apart;
- **joins** (several parents): each parent's stream gets its own spread rate, a whole number ``a_p`` of
  a window's ``b`` places (``rho_p <= capacity * a_p / b``, ``sum_p a_p <= b``), so whatever the phases
  of the streams a window of ``b / W'`` seconds receives at most ``sum_p ceil(b rho_p / W') <= b``
  requests (:func:`share_spread_rates`, :func:`required_capacity`).

:func:`realise` computes all four for a plan. :func:`solve_dispatchable` solves, realises, and repairs
until the realised plan is feasible: a child below its required capacity is re-planned at that rate
(its headroom), and a path whose realised worst case exceeds the SLO makes the next round solve with
the SLO seen by the splitter shrunk by that path's excess over its Theorem-1 figure. The repair chooses
every module under Theorem 1 and pays afterwards for what the dispatch realises, which costs more than
it must: a parent whose windows are sparse or rounded up makes its children dearer than the parent
saves, and one global shrink takes slack from every path. So a branch and bound over realised plans
(:class:`_RealisedSearch`) then looks for a cheaper realisable plan, choosing the modules in
topological order with each one's realised figures known exactly once its parents are chosen. The
returned plan's ``worst_case_latency_s`` figures are the realised ones; each module's
``dispatch.spread_rates`` maps a parent to the rate its workers spread this module's requests at
(:func:`planned_spread_rates`).
"""

from __future__ import annotations

import bisect
import heapq
import math
import operator
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.dispatch import DispatchSchedule, build_schedule
from planner.errors import InfeasibleError
from planner.latency import EPS, Group, worst_case
from planner.module import ModuleSchedule
from planner.policies import get_policy
from planner.solve import BilledCache, module_plan, solve
from planner.split import Topology, topology

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from planner.models import ModulePlan, Objective, Plan, ProblemSpec, ProfileEntry

__all__ = [
    "DEFAULT_CHILD_HEADROOM",
    "DEFAULT_SEARCH_WORK",
    "FAN_OUT_KEY",
    "Realisation",
    "annotate",
    "realise",
    "planned_spread_rates",
    "required_capacity",
    "required_spread_rate",
    "schedule_key",
    "share_spread_rates",
    "solve_dispatchable",
]

#: Minimum extra planned rate of every child module, as a fraction of its expected rate, on top of
#: what :func:`required_spread_rate` asks for (timing noise of a real data plane). docs/dispatch.md,
#: "Child headroom", has the measurements behind the value.
DEFAULT_CHILD_HEADROOM = 0.0
#: Units of work (module options examined plus module plans realised) the branch and bound over
#: realised plans spends on one problem before it keeps the cheapest plan found so far. On the 300
#: generated problems of seeds 0-2 (billed $/h: plain 1366.4, repair only 1714.3) it finds 1659.9 at
#: 30, 1649.8 at 60, 1647.4 at 120 and 1625.8 without a limit, for about +7 % (30-60), +12 % (120)
#: and +144 % (no limit) of a cold fleet epoch's function calls; 239 of the 300 need fewer than 60.
DEFAULT_SEARCH_WORK = 60
#: Plan extra of a :func:`solve_dispatchable` plan made with ``first_found`` (not the full solve's plan).
FIRST_FOUND_KEY = "first_found"
#: Where ``first_found`` starts: children planned this much above their rate (a fraction) and the
#: splitter SLO this fraction of the SLO, so that the first round realises more often. On the 100
#: generated problems of seed 0 (CPU of the solves, one process): 159 rounds instead of 252 starting
#: from the plain attempt, 0.50-0.58 s instead of 0.93 s, 566.1 $/h instead of 554.2 (the full solve:
#: 518.9); seeds 1 and 2: 0.67 s against 0.96-1.0 s.
QUICK_HEADROOM = 0.2
QUICK_SLO = 0.9
#: Bisection steps spent, once a realisable plan is found, looking for a cheaper one.
_REFINE_STEPS = 3
_SLO_STEP = 1e-7  # seconds: a shrink goes at least this far below the previous splitter SLO
_RATE_STEP = 1e-6  # relative: a raised child rate goes this far above its requirement
#: Problem extra naming the most children one parent request sends: ``[[parent, child, n], ...]``
#: (a data plane whose fan-out varies per request sends up to ``ceil(fan-out)``).
FAN_OUT_KEY = "max_children_per_request"


@dataclass(frozen=True, slots=True)
class Realisation:
    """What the dispatch realises for one module of a plan (seconds, req/s).

    A module's requests form one stream per parent (a root: its arrivals). Stream ``p`` is spread at
    ``spread_rates[p]``; it needs ``required_rates[p]`` so that two of its bursts never overlap, and its
    bursts are at most ``bursts[p]`` requests. ``required_rate`` is the capacity rate at which every
    stream fits in the windows (:func:`required_capacity`; one parent: its required rate)."""

    planned_s: float  # the planner's own figure (Theorem 1 under TC)
    schedule_s: float  # the schedule's exact steady-state bound (uniform arrivals, constant durations)
    capacity_rate: float  # min(planned W, effective W'): a window of b / W' holds b requests this dense
    burst: int  # largest number of this module's requests that appear at once (1 for a root)
    spread_rate: float  # smallest spread rate over the parents (a root: its arrival rate)
    burst_s: float  # max over parents of (burst - 1) / spread rate: the extra wait of a burst's last
    required_rate: float  # capacity rate the streams need (a root: its arrival rate)
    guaranteed: bool  # the bound is proven for this module (joins included: per-parent spread rates)
    worst_case_s: float  # max(planned, schedule) + burst_s
    schedule: DispatchSchedule = field(repr=False)
    spread_rates: dict[str, float] = field(default_factory=dict)  # parent -> its stream's spread rate
    required_rates: dict[str, float] = field(default_factory=dict)  # parent -> rate its bursts need
    bursts: dict[str, int] = field(default_factory=dict)  # parent -> most requests of one burst

    @property
    def collision_free(self) -> bool:
        """No window receives more than its batch: each parent's bursts do not overlap (its spread rate
        >= its required rate, so its requests are >= 1 / rho_p apart) and the streams' shares of a
        window fit its batch, ``sum_p ceil(b rho_p / capacity) <= b`` for every batch size ``b`` (one
        stream: ``rho <= capacity``)."""
        tol = 1e-9 * self.capacity_rate
        if self.spread_rates:
            if any(self.spread_rates[p] < need - tol for p, need in self.required_rates.items()):
                return False
            streams = [self.spread_rates[p] for p, n in self.bursts.items() if n >= 1]
        else:  # a root: its arrivals
            if self.spread_rate < self.required_rate - tol:
                return False
            streams = [self.spread_rate]
        return self.guaranteed and _fits(streams, _batches(self.schedule), self.capacity_rate)

    def as_extra(self) -> dict[str, Any]:
        return {
            "theorem1_s": self.planned_s,
            "schedule_s": self.schedule_s,
            "capacity_rate": self.capacity_rate,
            "burst": self.burst,
            "spread_rate": self.spread_rate,
            "spread_rates": dict(self.spread_rates),
            "burst_s": self.burst_s,
            "required_rate": self.required_rate,
            "required_rates": dict(self.required_rates),
            "bursts": dict(self.bursts),
            "guaranteed": self.guaranteed,
            "worst_case_latency_s": self.worst_case_s,
            "period_s": self.schedule.period_s,
            "effective_rate": self.schedule.effective_rate,
        }


def _batches(sched: DispatchSchedule) -> list[int]:
    """The batch sizes of the schedule's windows (groups with no window take no request; computed once
    per schedule)."""
    memo = sched.derived()
    out = memo.get(_BATCHES)
    if out is None:
        out = memo[_BATCHES] = tuple(sorted({sched.groups[g].batch for g in sched.window_groups()}))
    return list(out)


_BATCHES = "batches"  # key of _batches' answer in a schedule's memo


def _fits(streams: Sequence[float], batches: Sequence[int], capacity: float) -> bool:
    """Whether streams whose requests are ``1 / rate`` apart (each) never put more than ``b`` requests
    in a window of ``b / capacity`` seconds: a stream puts at most ``ceil(b rate / capacity)`` in it."""
    if not streams:
        return True
    if capacity <= 0:
        return False
    return all(sum(math.ceil(b * r / capacity - 1e-9) for r in streams) <= b for b in batches)


def required_capacity(needs: Sequence[float], batches: Sequence[int]) -> float:
    """Smallest capacity rate ``C`` at which streams spread at rates ``needs`` fit every window:
    ``sum_p ceil(b need_p / C) <= b`` for every batch size ``b``. One stream: its rate. Two streams of
    20 req/s and a batch of 3 need 60 req/s, not 40: a window of ``3 / C`` seconds can hold
    ``ceil(60 / C)`` requests of each stream, so one stream must have a single place (``C >= 60``).
    ``C`` is one of the points ``b need_p / a`` (``a = 1..b``), where a stream's count steps."""
    busy = [x for x in needs if x > 0]
    if not busy:
        return 0.0
    if not all(math.isfinite(x) for x in busy):
        return math.inf
    if any(b < len(busy) for b in batches):
        return math.inf  # every stream takes at least one place of a window
    out = 0.0
    for b in batches:
        cands = sorted({b * x / a for x in busy for a in range(1, b + 1)})
        lo, hi = 0, len(cands) - 1  # the count is non-increasing in C, and <= b at the largest point
        while lo < hi:
            mid = (lo + hi) // 2
            if sum(math.ceil(b * x / cands[mid] - 1e-9) for x in busy) <= b:
                hi = mid
            else:
                lo = mid + 1
        out = max(out, cands[lo])
    return out


def share_spread_rates(
    needs: Mapping[str, float],
    bursts: Mapping[str, int],
    batches: Sequence[int],
    capacity: float,
    *,
    leaf: bool,
) -> dict[str, float] | None:
    """Per-parent spread rates whose streams fit the windows (:func:`_fits`), each at least the
    parent's ``needs`` rate; ``None`` when they do not fit (``capacity`` < :func:`required_capacity`).

    For each batch size ``b``, parent ``p`` gets ``a_p`` of the window's ``b`` places, at least what its
    need takes (``ceil(b need_p / capacity)``), and ``rho_p = capacity * a_p / b`` (a hair below, so
    float rounding never puts ``b + 1`` requests in a window; the smallest over the batch sizes). A leaf
    gives the spare places one at a time to the parent with the largest burst term ``(n_p - 1) / a_p``
    (shortest bursts: the greedy minimises the largest term); a module with children keeps every stream
    at its need (a sparser stream needs less of its own children's capacity, like one parent's). A
    parent whose windows send no child (``bursts[p] == 0``) takes no place."""
    top = capacity * (1 - _RATE_STEP)
    busy = [p for p in needs if bursts[p] >= 1]
    rates = dict.fromkeys(needs, top)
    if not busy:
        return rates
    if top <= 0 or not all(math.isfinite(needs[p]) for p in busy):
        return None
    tol = 1e-9 * capacity
    for b in batches:
        units = {p: max(1, math.ceil(b * (needs[p] - tol) / top - 1e-9)) for p in busy}
        spare = b - sum(units.values())
        if spare < 0:
            return None
        if leaf and len(busy) == 1:
            units[busy[0]] = b
        elif leaf:
            for _ in range(spare):
                p = max(busy, key=lambda q: ((bursts[q] - 1) / units[q], needs[q] / units[q]))
                units[p] += 1
        for p in busy:
            rates[p] = min(rates[p], top * units[p] / b)
    if not leaf:
        for p in busy:
            rates[p] = min(rates[p], max(needs[p], 1e-9) * (1 + _RATE_STEP))
    return rates


def _children_per_request(
    problem: ProblemSpec, fan_out: Mapping[tuple[str, str], float] | None
) -> dict[tuple[str, str], float]:
    """Most children one parent request sends along each edge: ``fan_out``, else the problem's
    ``max_children_per_request`` extra (a list of ``[parent, child, n]``), else the rate ratio
    ``rate(child) / sum(rate(parents))`` (the simulator's spawn model: a batch of ``k`` requests
    spawns at most ``ceil(ratio * k)``)."""
    parents = topology(problem).parents
    hint = dict(fan_out or {})
    for item in (problem.model_extra or {}).get(FAN_OUT_KEY) or []:
        src, dst, n = item
        hint.setdefault((str(src), str(dst)), float(n))
    out: dict[tuple[str, str], float] = {}
    for src, dst in problem.edges:
        if (src, dst) in hint:
            out[(src, dst)] = hint[(src, dst)]
        else:
            total = sum(problem.modules[p].rate for p in parents[dst])
            out[(src, dst)] = problem.modules[dst].rate / total
    return out


def _window_arrays(sched: DispatchSchedule) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per window of one period: length, completion offset after the window's start (length + wait +
    duration), completion time, batch size."""
    start, end, wait, dur, batch = sched.window_arrays()
    length = end - start
    return length, length + wait + dur, end + wait + dur, batch


def required_spread_rate(
    parent: DispatchSchedule,
    per_request: float,
    parent_spacing_rate: float | Sequence[float],
    *,
    spaced: bool = True,
) -> tuple[float, int]:
    """(spread rate a child needs so that no two of its bursts from ``parent`` overlap, largest burst).

    ``parent_spacing_rate``: the parent's own requests form streams of rate ``r`` each (a root: its
    rate; a child: its spread rate, one per parent of its own). A child's streams are *spaced*: its
    parents' workers dispatch them at least ``1 / r`` apart (the spread, whose bursts never overlap).
    A root's stream is not (``spaced=False``): frames arrive when cameras send them, and what the
    front enforces is a count per window (``A_k`` below, ``front/admission.py``); for a
    stream at least ``1 / r`` apart that count is what a window can hold, so the counts are the same
    either way. The parent's batches complete at ``end + wait + d`` of its windows,
    periodically (constant durations; an empty window completes nothing, which only widens the gaps).
    Window ``k`` holds at most ``A_k = min(b_k, sum_r ceil(r * length_k))`` requests and sends at most
    ``n_k = ceil(per_request * A_k)`` children, spread over ``n_k / W_s`` seconds, which must end before
    the next non-empty completion, at least ``gap_k`` later: the next completion of the pattern and,
    with one configuration and one spaced stream (completion order = arrival order), also
    ``1 / r - length_k`` (the next request arrives ``1 / r`` after the last one of window ``k``; an
    unspaced stream can put a request at the start of the next window). Returns ``max_k n_k / gap_k``.

    The answer is kept in the parent schedule's memo (:meth:`DispatchSchedule.derived`) under every
    other input (the period, the fan-out and the stream rates, compared as floats: ``-0.0`` and ``0.0``
    give the same counts and the same error), so the rounds of a solve and the shapes of a plan that
    keep the parent's schedule and streams get it without computing it again."""
    streams = (
        (float(parent_spacing_rate),)
        if isinstance(parent_spacing_rate, int | float)
        else tuple(float(r) for r in parent_spacing_rate)
    )
    memo = parent.derived()
    key = ("spread", parent.period_s, float(per_request), streams, spaced)
    hit = memo.get(key)
    if hit is None:
        small = len(parent.windows) <= _SMALL_PATTERN and all(map(math.isfinite, (*streams, per_request)))
        compute = _required_spread_rate_small if small else _required_spread_rate
        hit = memo[key] = compute(parent, float(per_request), streams, spaced)
    rate, burst = hit
    return rate, burst


#: Largest parent period (windows) whose completion pattern :func:`required_spread_rate` reads in plain
#: Python (:func:`_required_spread_rate_small`): numpy costs microseconds per call on the few windows
#: most parents have (one group of 1-8 windows).
_SMALL_PATTERN = 96


def _required_spread_rate_small(
    parent: DispatchSchedule, per_request: float, streams: tuple[float, ...], spaced: bool = True
) -> tuple[float, int]:
    """:func:`_required_spread_rate` in plain Python floats: the same IEEE operations in the same order
    (numpy's ``mod`` is Python's ``%`` on floats, its stable ``argsort`` a stable ``sorted``, its
    ``minimum``/``maximum`` conditionals that keep the same operand), so the same answer, bit for bit."""
    start, end, wait, dur, batch = parent.window_lists()
    period = parent.period_s
    length = [e - s for e, s in zip(end, start, strict=True)]
    n: list[float] = []
    for ln, b in zip(length, batch, strict=True):
        places = 0.0
        for r in streams:
            places += float(math.ceil(r * ln - 1e-9))
        held = b if b <= places else places  # np.minimum (no NaN here)
        n.append(float(math.ceil(per_request * held - 1e-9)))
    if not any(x >= 1 for x in n):
        return 0.0, 0
    x = [((e + w) + d) % period for e, w, d in zip(end, wait, dur, strict=True)]
    order = sorted(range(len(x)), key=x.__getitem__)
    gap = [0.0] * len(x)
    for pos in range(len(order) - 1):
        gap[order[pos]] = x[order[pos + 1]] - x[order[pos]]
    gap[order[-1]] = (x[order[0]] + period) - x[order[-1]]
    if spaced and len(parent.window_groups()) == 1 and len(streams) == 1:
        offset = [(ln + w) + d for ln, w, d in zip(length, wait, dur, strict=True)]
        lead = 1.0 / streams[0] + min(o - ln for o, ln in zip(offset, length, strict=True))
        for k, o in enumerate(offset):
            alt = lead - o
            gap[k] = gap[k] if gap[k] >= alt else alt  # np.maximum
    need = -math.inf
    for nk, g in zip(n, gap, strict=True):
        if nk >= 1:
            v = nk / (g if g >= 1e-300 else 1e-300) if g > 1e-12 else math.inf
            need = need if need >= v else v
    return need, int(max(n))


def _required_spread_rate(
    parent: DispatchSchedule, per_request: float, streams: tuple[float, ...], spaced: bool = True
) -> tuple[float, int]:
    """:func:`required_spread_rate`, computed (numpy: the parents with long periods)."""
    length, offset, done, batch = _window_arrays(parent)
    places = np.zeros_like(length)
    for r in streams:
        places += np.ceil(r * length - 1e-9)
    held = np.minimum(batch, places)
    n = np.ceil(per_request * held - 1e-9)
    period = parent.period_s
    x = np.mod(done, period)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    gap_sorted = np.empty_like(xs)
    gap_sorted[:-1] = np.diff(xs)
    gap_sorted[-1] = xs[0] + period - xs[-1]
    gap = np.empty_like(gap_sorted)
    gap[order] = gap_sorted
    if spaced and len(parent.window_groups()) == 1 and len(streams) == 1:
        gap = np.maximum(gap, 1.0 / streams[0] + float(np.min(offset - length)) - offset)
    busy = n >= 1
    if not np.any(busy):
        return 0.0, 0
    with np.errstate(divide="ignore"):
        need = np.where(gap[busy] > 1e-12, n[busy] / np.maximum(gap[busy], 1e-300), math.inf)
    return float(np.max(need)), int(np.max(n))


def planned_spread_rates(module_plan: ModulePlan) -> dict[str, float]:
    """Parent -> the rate at which that parent's workers spread a burst of this module's requests
    (``k``-th at ``completion + k / rate``), as a dispatch-aware plan records it
    (``dispatch.spread_rates``); empty for other plans (callers then use
    :func:`planner.dispatch.planned_spread_rate`, one rate for every parent)."""
    info = (module_plan.model_extra or {}).get("dispatch")
    rates = info.get("spread_rates") if isinstance(info, dict) else None
    if not isinstance(rates, dict):
        return {}
    return {str(p): float(r) for p, r in rates.items() if isinstance(r, int | float) and r > 0}


def _planned_figure(mp: ModulePlan) -> float:
    """The planner's own worst case: a realised plan (:func:`annotate`) keeps it in ``dispatch``."""
    info = (mp.model_extra or {}).get("dispatch")
    t1 = info.get("theorem1_s") if isinstance(info, dict) else None
    return float(t1) if isinstance(t1, int | float) else mp.worst_case_latency_s


def schedule_key(name: str, mp: ModulePlan, prices: Mapping[str, float]) -> tuple[object, ...]:
    """The key of a module's schedule in :func:`realise`'s ``cache``: everything
    :func:`~planner.dispatch.build_schedule` reads (the module's name, its groups in order and their
    hardware prices, which set Theorem 1's throughput-cost order), so a cache may be shared by plans and
    problems with other prices."""
    return (
        name,
        *(
            (
                g.hardware,
                g.batch,
                g.concurrency,
                g.machines,
                g.rate_per_machine,
                g.duration_s,
                prices[g.hardware],
            )
            for g in mp.groups
        ),
    )


def realise(
    problem: ProblemSpec,
    plan: Plan,
    *,
    fan_out: Mapping[tuple[str, str], float] | None = None,
    cache: dict[tuple[object, ...], DispatchSchedule] | None = None,
) -> dict[str, Realisation]:
    """Each module's dispatch-realised worst case for ``plan`` (see the module doc).

    Each parent's stream of a child is spread at its own rate (:func:`share_spread_rates`): a leaf as
    fast as its share of the capacity allows (the shortest bursts); a child with children of its own no
    faster than it must (its required rates), because a burst spread at the capacity rate reaches the
    next module as densely as that module's windows pass it on. ``fan_out`` maps an edge to the most
    children one parent request sends along it (the local stack passes ``ceil`` of the app's fan-out
    factors); missing edges use the rate ratio. ``cache`` keeps schedules between calls (a module plan
    that comes back is not scheduled again); its keys hold all a schedule depends on (the module's name,
    groups and their prices), so one dict may serve several calls, plans and problems."""
    prices = {h: hw.price_per_hour for h, hw in problem.hardware.items()}
    per_request = _children_per_request(problem, fan_out)
    topo = topology(problem)
    streams: dict[str, list[float]] = {}  # module -> spacing rates of its request streams
    out: dict[str, Realisation] = {}
    for name in topo.order:
        mp = plan.modules[name]
        sched = _schedule_of(name, mp, prices, cache)
        out[name], streams[name] = _realise_module(problem, topo, name, mp, sched, per_request, out, streams)
    return out


def _schedule_of(
    name: str,
    mp: ModulePlan,
    prices: Mapping[str, float],
    cache: dict[tuple[object, ...], DispatchSchedule] | None,
) -> DispatchSchedule:
    """Module ``name``'s schedule, from ``cache`` when it holds one (:func:`schedule_key`)."""
    key = schedule_key(name, mp, prices)
    sched = cache.get(key) if cache is not None else None
    if sched is None:
        sched = build_schedule(name, mp, prices)
        if cache is not None:
            cache[key] = sched
    return sched


def _realise_module(
    problem: ProblemSpec,
    topo: Topology,
    name: str,
    mp: ModulePlan,
    sched: DispatchSchedule,
    per_request: Mapping[tuple[str, str], float],
    out: Mapping[str, Realisation],
    streams: Mapping[str, list[float]],
) -> tuple[Realisation, list[float]]:
    """One module's :class:`Realisation` (:func:`realise`) and the spacing rates of its request
    streams, given its parents' (``out``, ``streams``): a module's figures depend on its own plan and
    its ancestors', never on its descendants'. ``topo``: the problem's :func:`topology`."""
    parents = topo.parents[name]
    capacity = min(sched.planned_rate, sched.effective_rate)
    planned_s = _planned_figure(mp)
    if not parents:
        rate = problem.modules[name].rate
        root = Realisation(
            planned_s=planned_s,
            schedule_s=sched.worst_case_latency_s,
            capacity_rate=capacity,
            burst=1,
            spread_rate=rate,
            burst_s=0.0,
            required_rate=rate,
            guaranteed=True,
            worst_case_s=max(planned_s, sched.worst_case_latency_s),
            schedule=sched,
        )
        return root, [rate]
    needs: dict[str, float] = {}
    bursts: dict[str, int] = {}
    for p in parents:
        needs[p], bursts[p] = required_spread_rate(
            out[p].schedule, per_request[(p, name)], streams[p], spaced=bool(topo.parents[p])
        )
    batches = _batches(sched)
    rates = share_spread_rates(needs, bursts, batches, capacity, leaf=not topo.children[name])
    if rates is None:  # the streams do not fit (the repair raises the capacity): share it by need
        finite = all(math.isfinite(x) for x in needs.values()) and sum(needs.values()) > 0
        total = sum(needs.values()) if finite else float(len(needs))
        top = capacity * (1 - _RATE_STEP)
        rates = {p: top * (needs[p] if finite else 1.0) / total for p in needs}
    busy = [p for p in parents if bursts[p] >= 1]
    burst_s = max(((bursts[p] - 1) / rates[p] if rates[p] > 0 else math.inf for p in busy), default=0.0)
    child = Realisation(
        planned_s=planned_s,
        schedule_s=sched.worst_case_latency_s,
        capacity_rate=capacity,
        burst=max(1, *bursts.values()),
        spread_rate=min(rates.values()),
        burst_s=burst_s,
        required_rate=required_capacity([needs[p] for p in busy], batches),
        guaranteed=True,
        worst_case_s=max(planned_s, sched.worst_case_latency_s) + burst_s,
        schedule=sched,
        spread_rates=rates,
        required_rates=needs,
        bursts=bursts,
    )
    return child, [rates[p] for p in busy]


# --------------------------------------------------------------------------- dispatch-aware solve


Key = tuple[str, int, int]  # (hardware, batch, concurrency): one configuration of a module


@dataclass
class _Attempt:
    splitter_slo: float
    rates: dict[str, float]  # the rates the solve planned for (children raised by headroom)
    only: dict[str, Key]  # modules restricted to one configuration (a parent whose bursts overlap)
    plan: Plan
    real: dict[str, Realisation]
    over: float  # worst realised path minus the SLO (<= 0: within the SLO)
    excess: float  # largest realised-minus-planned sum over the paths that miss the SLO
    short: dict[str, float]  # children below their required spread rate -> that rate
    cost: float
    round: int = 0  # which attempt of its search (1: the first), where a caller needs it

    @property
    def ok(self) -> bool:
        return self.over <= EPS and not self.short

    def same_variant(self, other: _Attempt) -> bool:
        return self.rates == other.rates and self.only == other.only


def _cost(plan: Plan, objective: Objective) -> float:
    return plan.billed_per_hour if objective == "billed" else plan.cost_per_hour


class _Search:
    """Solves at given splitter SLOs and child rates; keeps every attempt."""

    def __init__(
        self,
        problem: ProblemSpec,
        *,
        policy: str,
        objective: Objective,
        fan_out: Mapping[tuple[str, str], float] | None,
        schedules: dict[tuple[object, ...], DispatchSchedule] | None = None,
    ) -> None:
        self.problem = problem
        self.policy, self.objective, self.fan_out = policy, objective, fan_out
        self.attempts: list[_Attempt] = []
        self.schedules: dict[tuple[object, ...], DispatchSchedule] = {} if schedules is None else schedules
        topo = topology(problem)
        self.joins = {m: len(ps) for m, ps in topo.parents.items() if len(ps) > 1}
        self.paths = topo.paths  # of the problem every variant keeps (only rates and profiles change)
        # the rounds solve variants of one problem: most modules' billed optima come back unchanged
        self.billed = BilledCache()
        self._profiles: dict[tuple[str, Key | None, bool], list[ProfileEntry]] = {}

    def _profile(self, m: str, key: Key | None, joined: bool) -> list[ProfileEntry]:
        """Module ``m``'s profile in a variant: restricted to configuration ``key`` (None: all) and, for a
        join, to batches with a place for every parent's stream; the module's own list when nothing is
        removed. The rounds get the same list object for the same restriction, so the solves' shared
        :class:`BilledCache` knows its configurations (it recognises a profile list by identity)."""
        found = self._profiles.get((m, key, joined))
        if found is None:
            mod = self.problem.modules[m]
            profile = [e for e in mod.profile if key is None or (e.hardware, e.batch, e.concurrency) == key]
            if joined:
                profile = [e for e in profile if e.batch >= self.joins[m]]
            found = self._profiles[(m, key, joined)] = (
                profile if len(profile) < len(mod.profile) else mod.profile
            )
        if joined and not found:
            raise InfeasibleError(
                f"infeasible: join {m!r} has no configuration with a batch of at least "
                f"{self.joins[m]} (one place per parent stream)"
            )
        return found

    def attempt(
        self, splitter_slo: float, rates: dict[str, float], only: dict[str, Key], *, plain: bool = False
    ) -> _Attempt:
        """Solve and realise one variant. Unless ``plain``, a join of ``k`` parents may only use
        configurations whose batch has room for every parent's stream (``b >= k``: each stream takes
        at least one place of a window, :func:`required_capacity`)."""
        modules = {}
        for m, mod in self.problem.modules.items():
            update: dict[str, Any] = {"rate": rates[m]}
            profile = self._profile(m, only.get(m), not plain and m in self.joins)
            if profile is not mod.profile:
                update["profile"] = profile
            modules[m] = mod.model_copy(update=update)
        spec = self.problem.model_copy(update={"slo_s": splitter_slo, "modules": modules})
        plan = solve(spec, self.policy, self.objective, cache=self.billed)
        return self.adopt(splitter_slo, rates, only, plan)

    def adopt(
        self, splitter_slo: float, rates: dict[str, float], only: dict[str, Key], plan: Plan
    ) -> _Attempt:
        """Realise ``plan`` (planned for ``rates``) and keep it as an attempt."""
        real = realise(self.problem, plan, fan_out=self.fan_out, cache=self.schedules)
        over, excess = -math.inf, 0.0
        for path in self.paths:
            lat = sum(real[m].worst_case_s for m in path)
            over = max(over, lat - self.problem.slo_s)
            if lat > self.problem.slo_s + EPS:
                excess = max(excess, lat - sum(real[m].planned_s for m in path))
        short = {m: r.required_rate for m, r in real.items() if r.guaranteed and not r.collision_free}
        a = _Attempt(
            splitter_slo,
            dict(rates),
            dict(only),
            plan,
            real,
            over,
            excess,
            short,
            _cost(plan, self.objective),
        )
        self.attempts.append(a)
        return a

    def best(self) -> _Attempt | None:
        ok = [a for a in self.attempts if a.ok]
        return min(ok, key=lambda a: (a.cost, -a.splitter_slo)) if ok else None


def _ancestors(problem: ProblemSpec) -> dict[str, set[str]]:
    topo = topology(problem)
    parents = topo.parents
    out: dict[str, set[str]] = {}
    for m in topo.order:
        out[m] = set(parents[m]).union(*(out[p] for p in parents[m]))
    return out


def _repair(attempts: list[_Attempt], problem: ProblemSpec) -> tuple[dict[str, float], dict[str, Key]]:
    """The next variant for children below their required spread rate, upstream first (a child below a
    module that changes now is left for the next round: its requirement changes with it). A parent
    with several configurations completes batches at irregular times (bursts can nearly coincide), so
    it is restricted to the configuration that carries most of its rate (its multi-configuration
    combination is forbidden); a child of a one-configuration parent is planned at the rate its spread
    needs (the plan's W is at least the rate, the spread rate min(W, W') can be a little lower, so the
    rate is raised by the shortfall ratio). Raising a child changes its parent's plan a little, and so
    its requirement: a child raised again overshoots by 2 %, 4 %, 8 %... so the chase ends."""
    last = attempts[-1]
    rates, only = dict(last.rates), dict(last.only)
    parents, ancestors = topology(problem).parents, _ancestors(problem)
    changed: set[str] = set()
    for child in (m for m in topology(problem).order if m in last.short):
        if ancestors[child] & (changed | set(last.short)):
            continue
        multi = [
            p
            for p in parents[child]
            if p not in last.only
            and sum(1 for g in last.plan.modules[p].groups if g.rate_per_machine > 0) > 1
        ]
        for p in multi:
            top = max(last.plan.modules[p].groups, key=lambda g: g.machines * g.rate_per_machine)
            only[p] = (top.hardware, top.batch, top.concurrency)
            changed.add(p)
        if not multi and math.isfinite(last.short[child]):
            need = last.short[child]
            ratio = need / max(last.real[child].capacity_rate, 1e-12)
            again = sum(1 for a in attempts if child in a.short) - 1
            overshoot = 0.01 * 2**again if again > 0 else _RATE_STEP
            rates[child] = max(rates[child] * ratio, need) * (1 + overshoot)
            changed.add(child)
    return rates, only


def _small_join_batches(plan: Plan, joins: Mapping[str, int]) -> bool:
    """Whether a join of ``k`` parents uses a configuration with a batch below ``k``."""
    return any(g.batch < k for m, k in joins.items() for g in plan.modules[m].groups)


def _relax(search: _Search, good: _Attempt, floor: Mapping[str, float], max_rounds: int) -> None:
    """Children raised in earlier rounds may need less once the plan around them settled: plan them
    for what the realisable plan requires now (never below ``floor``, the rate with the minimum
    headroom) and keep the result when it is realisable (and cheaper: :meth:`_Search.best` decides)."""
    current = good
    while len(search.attempts) < max_rounds:
        lower = {
            m: max(floor[m], r.required_rate * (1 + _RATE_STEP))
            for m, r in current.real.items()
            if m in floor and current.rates[m] > max(floor[m], r.required_rate) * 1.01
        }
        if not lower:
            return
        try:
            a = search.attempt(current.splitter_slo, {**current.rates, **lower}, current.only)
        except InfeasibleError:
            return
        if not a.ok or a.cost >= current.cost - EPS:
            return
        current = a


def _rounds(
    search: _Search, last: _Attempt, rates: dict[str, float], only: dict[str, Key], max_rounds: int
) -> None:
    """Solve again from ``last`` until an attempt realises or ``max_rounds`` attempts were made: a child
    short of its spread rate is raised (:func:`_repair`); else the splitter SLO is lowered by the worst
    missing path's excess (at ``rates`` and ``only``, the variant of the rounds so far)."""
    problem = search.problem
    while not last.ok and len(search.attempts) < max_rounds:
        nxt_slo = last.splitter_slo
        if last.short:
            rates, only = _repair(search.attempts, problem)
            if (rates, only) == (last.rates, last.only):
                return  # nothing a rate can fix (a requirement without bound)
        else:  # the same excess on a plan whose paths fit slo - excess fits the SLO
            nxt_slo = min(problem.slo_s - last.excess, last.splitter_slo - _SLO_STEP)
        try:
            last = search.attempt(nxt_slo, rates, only)
        except InfeasibleError:
            return


def _first_found(
    problem: ProblemSpec,
    policy: str,
    objective: Objective,
    fan_out: Mapping[tuple[str, str], float] | None,
    schedules: dict[tuple[object, ...], DispatchSchedule] | None,
    parents: Mapping[str, Sequence[str]],
    max_rounds: int,
) -> _Attempt | None:
    """The first realisable attempt of the rounds started at ``QUICK_HEADROOM`` and ``QUICK_SLO``
    (``round``: how many it took), or None."""
    search = _Search(problem, policy=policy, objective=objective, fan_out=fan_out, schedules=schedules)
    rates = {m: s.rate * (1 + QUICK_HEADROOM) if parents[m] else s.rate for m, s in problem.modules.items()}
    try:
        first = search.attempt(problem.slo_s * QUICK_SLO, rates, {})
    except InfeasibleError:
        return None
    _rounds(search, first, rates, {}, max_rounds)
    found = next((a for a in search.attempts if a.ok), None)
    return None if found is None else replace(found, round=search.attempts.index(found) + 1)


def solve_dispatchable(
    problem: ProblemSpec,
    *,
    policy: str = "skinflint",
    objective: Objective = "billed",
    child_headroom: float = DEFAULT_CHILD_HEADROOM,
    fan_out: Mapping[tuple[str, str], float] | None = None,
    max_rounds: int = 12,
    schedules: dict[tuple[object, ...], DispatchSchedule] | None = None,
    search_work: int = DEFAULT_SEARCH_WORK,
    first_found: bool = False,
) -> Plan:
    """The cheapest plan found whose dispatch-realised worst cases (:func:`realise`) meet the SLO.

    Children are first planned for ``rate * (1 + child_headroom)``. Each round solves; a child whose
    spread rate is below its requirement is raised to it for the next round; otherwise, while the
    realised plan misses the SLO, the next round solves with the splitter's SLO lowered to the SLO
    minus the worst missing path's excess over its Theorem-1 figure. A realisable plan at the (proven)
    plain optimum is returned as it is: nothing realisable is cheaper. Otherwise a branch and bound over
    realised plans (:class:`_RealisedSearch`, for the policies whose module plans are exact billed
    optima: ``skinflint``, ``optimal``; objective ``billed``) looks for a cheaper one, spending at most
    ``search_work`` units (options examined plus plans realised; 0: no search). When it did not finish
    (or does not apply), children raised in earlier rounds are re-planned at what the plan requires and
    up to three bisection rounds between the realisable splitter SLO and the nearest unrealisable one
    above look for a cheaper plan, as the solve did before the search, and the cheapest plan of both is
    kept. A finished search is exact over its own options, not over every plan those refinements can
    reach (of 700 generated problems, seeds 0-6, none came out dearer than the solve without search). The
    plan records the plain optimum (``solve`` on the unchanged problem), the price of realisability and
    what the search did (``dispatch_search``: work, complete, improved, the repaired cost it started
    from; None when there was no search). Raises :class:`~planner.errors.InfeasibleError` when
    ``max_rounds`` solves find no realisable plan (or the plain problem is infeasible).

    ``schedules``: where the module schedules the rounds build are kept (:func:`realise`'s ``cache``;
    default a dict of this call's own). A caller that passes one dict gets them back, e.g. to realise
    the plan again after shaping it (:func:`planner.fleet.plan_fleet`) without building them again; it
    changes only the time taken, never the plan.

    ``first_found``: a quick mode, for a caller that must plan many problems at once under a time
    budget and solves them in full later (:func:`planner.fleet.plan_fleet`). The rounds start with
    children at ``QUICK_HEADROOM`` above their rate and the splitter SLO at ``QUICK_SLO`` of the SLO
    (no plain attempt), and the first realisable plan is returned, without the search, the re-planned
    children or the bisections: about 0.6 of the full solve's CPU on generated problems, and about 9 %
    dearer. It records ``first_found: True`` and no plain optimum. When those rounds find nothing, the
    full solve runs.
    """
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
    if child_headroom < 0 or not math.isfinite(child_headroom):
        raise ValueError(f"child_headroom must be a finite fraction >= 0, got {child_headroom}")
    if search_work < 0:
        raise ValueError(f"search_work must be >= 0, got {search_work}")
    started, cpu_started = time.perf_counter(), time.process_time()
    parents = topology(problem).parents
    base = {m: s.rate for m, s in problem.modules.items()}
    if first_found:
        quick = _first_found(problem, policy, objective, fan_out, schedules, parents, max_rounds)
        if quick is not None:
            plan = _assemble(
                problem,
                quick,
                None,
                None,
                child_headroom=QUICK_HEADROOM,
                rounds=quick.round,
                solve_ms=(time.perf_counter() - started) * 1000,
                cpu_ms=(time.process_time() - cpu_started) * 1000,
            )
            return plan.model_copy(update={FIRST_FOUND_KEY: True})
    search = _Search(problem, policy=policy, objective=objective, fan_out=fan_out, schedules=schedules)
    # raises InfeasibleError when Theorem 1 cannot
    plain = search.attempt(problem.slo_s, base, {}, plain=True)
    rates = {m: r * (1 + child_headroom) if parents[m] else r for m, r in base.items()}
    floor = {m: r for m, r in rates.items() if parents[m]}
    only: dict[str, Key] = {}
    reuse = child_headroom == 0 and not _small_join_batches(plain.plan, search.joins)
    try:
        last = plain if reuse else search.attempt(problem.slo_s, rates, only)
    except InfeasibleError:
        last = plain
    _rounds(search, last, rates, only, max_rounds)
    good = search.best()
    if good is None:
        raise InfeasibleError(
            f"infeasible: no dispatch-realisable plan within the SLO of {problem.slo_s:g} s "
            f"after {len(search.attempts)} round(s) (the plain plan's realised worst path is "
            f"{plain.over + problem.slo_s:.4g} s)",
            min_latency_s=plain.over + problem.slo_s,
        )
    # a proven plain optimum bounds every realisable plan from below: a plan at it is the cheapest
    at_bound = (plain.plan.model_extra or {}).get("proven_optimal") is True and good.cost <= plain.cost + EPS
    finder = None
    if search_work > 0 and _searchable(policy, objective) and not at_bound:
        try:
            finder = _RealisedSearch(search, good.cost, child_headroom, search_work)
        except InfeasibleError:  # a join without a batch for each parent: the repair's plans only
            finder = None
    picks = finder.run() if finder is not None else None
    if not at_bound and (finder is None or not finder.complete):
        _relax(search, good, floor, max_rounds)
        _refine(search, search.best() or good, max_rounds)
    found = _adopt(search, good, picks) if picks is not None else None
    searched = None
    if finder is not None:
        searched = {
            "work": finder.work,
            "complete": finder.complete,
            "improved": found is not None and found.ok,
            "repaired_cost_per_hour": good.cost,
        }
    best = search.best()
    assert best is not None
    return _assemble(
        problem,
        best,
        plain,
        searched,
        child_headroom=child_headroom,
        rounds=len(search.attempts),
        solve_ms=(time.perf_counter() - started) * 1000,
        cpu_ms=(time.process_time() - cpu_started) * 1000,
    )


def _refine(search: _Search, good: _Attempt, max_rounds: int) -> None:
    """Bisect the splitter SLO between the realisable attempt and the nearest unrealisable one above it
    (same child rates): a larger splitter SLO can only make the Theorem-1 optimum cheaper."""
    above = [
        a.splitter_slo
        for a in search.attempts
        if not a.ok and a.same_variant(good) and a.splitter_slo > good.splitter_slo
    ]
    if not above:
        return
    lo, hi = good.splitter_slo, min(above)
    for _ in range(_REFINE_STEPS):
        if len(search.attempts) >= max_rounds or hi - lo < 1e-6:
            return
        mid = (lo + hi) / 2
        try:
            a = search.attempt(mid, good.rates, good.only)
        except InfeasibleError:
            return
        if a.ok:
            lo = mid
        else:
            hi = mid


_STAIR_STEP = 1e-7  # seconds: the next point of a module's cost staircase is this much faster


def _searchable(policy: str, objective: Objective) -> bool:
    """Whether :class:`_RealisedSearch` applies to ``policy``: one whose module plans are exact billed
    optima under Theorem 1 over every configuration (the search's options are such plans)."""
    pol = get_policy(policy)
    return (
        objective == "billed"
        and pol.module == "exact"
        and pol.model == "tc"
        and pol.batching
        and pol.hardware == "all"
    )


@dataclass
class _Pick:
    """One module's choice in :class:`_RealisedSearch`."""

    rate: float  # the rate the module is planned for
    schedule: ModuleSchedule
    plan: ModulePlan
    real: Realisation
    streams: list[float]  # the spacing rates of the module's request streams (:func:`_realise_module`)


class _RealisedSearch:
    """Branch and bound over realised plans, choosing one plan per module in topological order.

    A module's realised figures depend only on its own plan and its ancestors' (:func:`_realise_module`),
    so once its parents are chosen each of its options is realised exactly, at the rate its parents'
    bursts require (:func:`required_spread_rate`, :func:`required_capacity`; at least its rate times the
    child headroom) and within the budget its paths leave (the SLO minus the realised figures of the
    modules chosen on them and the smallest durations of the modules after it). Options, cheapest
    first: a leaf's cost staircase (its billed optimum within the budget, then the cheapest strictly
    faster plan, ...; the first that is collision-free and fits is its best: a leaf changes nothing for
    the other modules); a module with children, every one-configuration plan (:meth:`_one_config`:
    several configurations complete batches at irregular times, which its children pay for, as
    :func:`_repair` forbids). The bound on the modules not chosen yet is, per module, its cheapest plan
    at its expected rate within what its paths leave (its parents chosen: also its required rate times
    its cheapest price per req/s). ``work_limit`` units of work (options examined plus plans realised)
    end the search early (``complete`` is then False); the answer depends on nothing but the problem,
    the bound and the limit (not on what the caches hold)."""

    def __init__(self, search: _Search, bound: float, child_headroom: float, work_limit: int) -> None:
        problem = search.problem
        topo = self.topo = topology(problem)
        self.search, self.problem, self.order = search, problem, topo.order
        index = self.index = {m: i for i, m in enumerate(topo.order)}
        self.parents = [tuple(topo.parents[m]) for m in topo.order]
        self.leaf = [not topo.children[m] for m in topo.order]
        self.paths = [[index[m] for m in path] for path in topo.paths]
        self.on = [[j for j, path in enumerate(self.paths) if i in path] for i in range(len(self.order))]
        self.prices = {h: hw.price_per_hour for h, hw in problem.hardware.items()}
        self.per_request = _children_per_request(problem, search.fan_out)
        self.base = [problem.modules[m].rate for m in topo.order]
        self.least = [
            r * (1 + child_headroom) if ps else r for r, ps in zip(self.base, self.parents, strict=True)
        ]
        configs = [
            search.billed.module(search._profile(m, None, m in search.joins), problem.hardware).configs
            for m in topo.order
        ]
        self.tables = [search.billed.table(cs) for cs in configs]  # billed optima, shared with the rounds
        self.rows = [[(c.duration, c.batch, c.throughput, c.price, c) for c in cs] for cs in configs]
        self.floor = [min(c.duration for c in cs) for cs in configs]  # below every Theorem-1 figure
        self.max_batch = [max(c.batch for c in cs) for cs in configs]
        # per module: durations ascending, and the cheapest price per req/s among configurations that fast
        self.units: list[tuple[list[float], list[float]]] = []
        for cs in configs:
            durations, unit, cheapest = [], [], math.inf
            for c in sorted(cs, key=lambda c: c.duration):
                cheapest = min(cheapest, c.price / c.throughput)
                durations.append(c.duration)
                unit.append(cheapest)
            self.units.append((durations, unit))
        slo, n = problem.slo_s, len(self.order)
        # rest[j][k]: the smallest durations of path j's modules from module k on
        self.rest = [
            [sum(self.floor[i] for i in path if i >= k) for k in range(n + 1)] for path in self.paths
        ]
        self.lmax = [min(slo - self.rest[j][0] + self.floor[i] for j in self.on[i]) for i in range(n)]
        self.stairs: list[list[tuple[float, float]]] = [[] for _ in range(n)]  # base-rate (wcl, cost)
        self.stairs_end = [False] * n
        # per module: billed optima (worst case, budget, rate, capacity, plan); a plan is also the
        # optimum for a budget between its worst case and the budget asked, and for a rate up to its
        # capacity (it carries that rate and nothing cheaper carries the smaller one)
        self.known: list[list[tuple[float, float, float, float, ModuleSchedule | None]]] = [
            [] for _ in range(n)
        ]
        self.best = bound  # the cheapest realisable plan known (the repair's, then the search's)
        self.found: list[_Pick] | None = None
        self.work, self.work_limit, self.complete = 0, work_limit, True
        self.used = [0.0] * len(self.paths)  # realised worst case of the chosen modules, per path
        self.picks: list[_Pick | None] = [None] * n
        self.real: dict[str, Realisation] = {}
        self.streams: dict[str, list[float]] = {}
        # (module, ids of its chosen parents' realisations) -> those realisations, what _demand made of them
        self.demands: dict[tuple[int, ...], tuple[tuple[Realisation, ...], tuple[float, int]]] = {}
        # before[i][k]: module i's parents among modules ..k - 1
        self.before = [
            [tuple(p for p in self.parents[i] if index[p] < k) for k in range(n + 1)] for i in range(n)
        ]

    def run(self) -> list[_Pick] | None:
        """The cheapest realisable choice below the bound, if any."""
        self._branch(0, 0.0)
        return self.found

    def _staircase(self, i: int, rate: float, budget: float) -> Iterator[ModuleSchedule]:
        """Module ``i``'s cost staircase for ``rate`` from ``budget`` down: its billed optimum within the
        budget, then the cheapest plan strictly faster, and so on."""
        while (s := self._optimum(i, rate, budget)) is not None:
            yield s
            budget = s.wcl - _STAIR_STEP

    def _optimum(self, i: int, rate: float, budget: float) -> ModuleSchedule | None:
        """Module ``i``'s billed optimum (:class:`BilledCache`, shared with the rounds' solves)."""
        table = self.tables[i]
        found = table.get(rate, budget)
        if found is not None:
            return found[0]
        for lo, hi, low, high, sched in self.known[i]:
            if low <= rate <= high and lo - 1e-12 <= budget <= hi + 1e-12:
                return sched if sched is None or sched.rate == rate else replace(sched, rate=rate)
        found = table.configs.optimal(rate, budget)
        self.search.billed.put(table, rate, budget, found)
        sched, proven = found
        if proven:  # the optimum for (rate, budget) is the optimum for a rate up to its own capacity
            high = sum(g.total for g in sched.groups) if sched is not None else math.inf
            self.known[i].append((sched.wcl if sched is not None else -math.inf, budget, rate, high, sched))
        return sched

    def _one_config(self, i: int, rate: float, budget: float) -> Iterator[ModuleSchedule]:
        """Module ``i``'s one-configuration plans for ``rate`` within ``budget``, cheapest first (then
        the faster): every configuration on every number of machines ``n`` at full throughput whose
        Theorem-1 figure ``d + b / (n t)`` is within the budget. Not only the cheapest per budget: a
        dearer plan of another batch or machine count can complete batches more evenly, which its
        children pay less for."""
        rows, ceil = self.rows[i], math.ceil
        heap: list[tuple[float, float, int, int]] = []  # cost, Theorem-1 figure, configuration, machines
        for k, (d, b, t, p, _) in enumerate(rows):
            if d >= budget:
                continue
            n = max(1, ceil(rate / t - 1e-9), ceil(b / (t * (budget - d)) - 1e-9))
            while d + b / (n * t) > budget:
                n += 1
            heap.append((n * p, d + b / (n * t), k, n))
        heapq.heapify(heap)
        while heap:
            _, _, k, n = heapq.heappop(heap)
            d, b, t, p, config = rows[k]
            heapq.heappush(heap, ((n + 1) * p, d + b / ((n + 1) * t), k, n + 1))
            groups = (Group(config, n, t),)  # every machine at full throughput, as fill_machines runs them
            yield ModuleSchedule(groups, rate, worst_case(groups), "tc")

    def _cheapest(self, i: int, budget: float) -> float:
        """A lower bound on module ``i``'s cost within ``budget``: its cheapest plan at its expected rate
        (its base-rate staircase, generated as far as the bounds ask)."""
        points = self.stairs[i]
        if points and points[-1][0] <= budget + EPS:  # the points' worst cases fall: the first within
            for wcl, cost in points:
                if wcl <= budget + EPS:
                    return cost
        while not self.stairs_end[i]:
            s = self._optimum(i, self.base[i], points[-1][0] - _STAIR_STEP if points else self.lmax[i])
            if s is None or s.billed > self.best + EPS:
                self.stairs_end[i] = True  # later points cost more: no use for a bound below best
                break
            points.append((s.wcl, s.billed))
            if s.wcl <= budget + EPS:
                return s.billed
        return math.inf

    def _unit(self, i: int, budget: float) -> float:
        """Smallest price per req/s of module ``i``'s configurations faster than ``budget``."""
        durations, unit = self.units[i]
        k = bisect.bisect_left(durations, budget)
        return unit[k - 1] if k > 0 else math.inf

    def _demand(self, i: int, chosen: int) -> tuple[float, int]:
        """(The rate module ``i`` is planned for, the largest burst a parent sends it) from its parents
        among modules ``..chosen - 1`` (all its parents: exact; some: a lower bound, the others' streams
        can only ask for more capacity, :func:`required_capacity`)."""
        parents = self.before[i][chosen]
        if not parents:
            return self.least[i], 1
        reals = tuple(self.real[p] for p in parents)
        key = (i, *map(id, reals))
        memo = self.demands.get(key)
        if memo is not None and all(map(operator.is_, memo[0], reals)):
            return memo[1]
        m = self.order[i]
        needs, burst = [], 1
        for p, real in zip(parents, reals, strict=True):
            need, n = required_spread_rate(
                real.schedule, self.per_request[(p, m)], self.streams[p], spaced=bool(self.topo.parents[p])
            )
            needs.append(need)
            burst = max(burst, n)
        need = needs[0] if len(needs) == 1 else required_capacity(needs, [self.max_batch[i]])
        out = max(self.least[i], need * (1 + _RATE_STEP)), burst
        self.demands[key] = (reals, out)  # the realisations are kept: their ids are not reused
        return out

    def _rest(self, k: int, chosen: int) -> float:
        """A lower bound on the cost of modules ``k..`` given the latency of the chosen ones (modules
        ``..chosen - 1`` are realised)."""
        total, slo, used, rest = 0.0, self.problem.slo_s, self.used, self.rest
        for i in range(k, len(self.order)):
            budget = self.floor[i] + min([slo - used[j] - rest[j][k] for j in self.on[i]])
            cost = self._cheapest(i, budget)
            if self.before[i][chosen]:  # its rate is at least what its chosen parents require
                rate = self._demand(i, chosen)[0]
                if rate > self.base[i]:  # (at its rate, the cheapest plan is above rate * unit already)
                    cost = max(cost, rate * self._unit(i, budget))
            total += cost
            if total == math.inf:
                break
        return total

    def _rest_after(self, k: int, latency: float, chosen: int) -> float:
        """:meth:`_rest` of the modules after ``k`` with module ``k`` taking ``latency`` on its paths."""
        saved = [self.used[j] for j in self.on[k]]
        for j in self.on[k]:
            self.used[j] += latency
        try:
            return self._rest(k + 1, chosen)
        finally:
            for j, u in zip(self.on[k], saved, strict=True):
                self.used[j] = u

    def _realise(self, k: int, rate: float, s: ModuleSchedule, limit: float) -> _Pick | None:
        """Module ``k`` planned as ``s`` (for ``rate``), realised after the chosen modules; None when it
        is not collision-free or its realised worst case exceeds ``limit``."""
        m, mp = self.order[k], module_plan(s, s.wcl)
        sched = _schedule_of(m, mp, self.prices, self.search.schedules)
        real, streams = _realise_module(
            self.problem, self.topo, m, mp, sched, self.per_request, self.real, self.streams
        )
        self.work += 1
        if not real.collision_free or real.worst_case_s > limit + EPS:
            return None
        return _Pick(rate, s, mp, real, streams)

    def _branch(self, k: int, cost: float) -> None:
        """Choose module ``k`` (the modules before it chosen, at ``cost``), then the ones after it."""
        if k == len(self.order):
            if cost < self.best - EPS:
                self.best, self.found = cost, [p for p in self.picks if p is not None]
            return
        m, last = self.order[k], k == len(self.order) - 1
        rate, burst = self._demand(k, k)
        if not math.isfinite(rate):
            return
        limit = min(self.problem.slo_s - self.used[j] - self.rest[j][k + 1] for j in self.on[k])
        rest = self._rest(k + 1, k)  # as if this module took no time: a bound for every option
        options = self._staircase(k, rate, limit) if self.leaf[k] else self._one_config(k, rate, limit)
        while self.work < self.work_limit:
            s = next(options, None)
            self.work += 1
            if s is None or cost + s.billed + rest >= self.best - EPS:
                return  # later options cost more
            if burst > 1 and s.wcl + (burst - 1) / sum(g.total for g in s.groups) > limit + EPS:
                continue  # the spread rate is below the planned rate: the burst alone misses
            if not last and cost + s.billed + self._rest_after(k, s.wcl, k) >= self.best - EPS:
                continue  # even at its Theorem-1 figure (realised: at least that)
            pick = self._realise(k, rate, s, limit)
            if pick is None:
                continue
            self.real[m], self.streams[m], self.picks[k] = pick.real, pick.streams, pick
            latency = pick.real.worst_case_s
            if last or cost + s.billed + self._rest_after(k, latency, k + 1) < self.best - EPS:
                saved = [self.used[j] for j in self.on[k]]
                for j in self.on[k]:
                    self.used[j] += latency
                self._branch(k + 1, cost + s.billed)
                for j, u in zip(self.on[k], saved, strict=True):
                    self.used[j] = u
            del self.real[m], self.streams[m]
            self.picks[k] = None
            if self.leaf[k]:
                return  # a leaf's later options cost more and change nothing for the other modules
        self.complete = False


def _adopt(search: _Search, good: _Attempt, picks: Sequence[_Pick]) -> _Attempt:
    """Keep the plan of :class:`_RealisedSearch`'s ``picks`` (one per module, in topological order) as
    an attempt, realised again by :func:`realise` (the attempt's ``ok`` is the check). Each module's
    budget is its realised worst case plus the slack of its tightest path; a module with children is
    recorded as restricted to its one configuration."""
    problem, topo = search.problem, topology(search.problem)
    chosen = dict(zip(topo.order, picks, strict=True))
    realised = {m: p.real.worst_case_s for m, p in chosen.items()}
    slack = {
        m: min(problem.slo_s - sum(realised[x] for x in path) for path in topo.paths if m in path)
        for m in topo.order
    }
    modules = {
        m: p.plan.model_copy(update={"latency_budget_s": realised[m] + max(0.0, slack[m])})
        for m, p in chosen.items()
    }
    plan = good.plan.model_copy(
        update={
            "modules": modules,
            "cost_per_hour": sum(p.schedule.occupancy for p in picks),
            "billed_per_hour": sum(p.schedule.billed for p in picks),
            "paths": [
                {
                    "modules": list(path),
                    "worst_case_latency_s": sum(p.schedule.wcl for p in (chosen[m] for m in path)),
                }
                for path in topo.paths
            ],
            "proven_optimal": False,
        }
    )
    single = {
        m: (g.hardware, g.batch, g.concurrency)
        for m, p in chosen.items()
        if topo.children[m]
        for g in p.plan.groups
    }
    return search.adopt(good.splitter_slo, {m: p.rate for m, p in chosen.items()}, single, plan)


def annotate(problem: ProblemSpec, plan: Plan, real: Mapping[str, Realisation]) -> Plan:
    """``plan`` with the realised figures: each module's ``worst_case_latency_s`` (and its budget when
    smaller) is the realised worst case, ``dummy_rate`` is relative to the problem's rate, and the
    extras ``rate``, ``headroom_used`` (planned rate / rate - 1) and ``dispatch`` (the
    :class:`Realisation` figures, including the spread rate the data plane uses) are set; the plan's
    ``paths`` are the realised path sums. :func:`realise` of the result gives the same figures."""
    modules = {}
    for name, mp in plan.modules.items():
        r = real[name]
        rate = problem.modules[name].rate
        planned = sum(g.machines * g.rate_per_machine for g in mp.groups)
        modules[name] = mp.model_copy(
            update={
                "worst_case_latency_s": r.worst_case_s,
                "latency_budget_s": max(mp.latency_budget_s, r.worst_case_s),
                "dummy_rate": max(0.0, planned - rate),
                "rate": rate,
                "headroom_used": planned / rate - 1.0,
                "dispatch": r.as_extra(),
            }
        )
    paths = [
        {"modules": list(p), "worst_case_latency_s": sum(real[m].worst_case_s for m in p)}
        for p in topology(problem).paths
    ]
    return plan.model_copy(
        update={
            "modules": modules,
            "paths": paths,
            "slo_s": problem.slo_s,
            "dispatch_realised": True,
            "guaranteed": all(r.guaranteed for r in real.values()),
        }
    )


def _plain_figures(problem: ProblemSpec, best: _Attempt, plain: _Attempt | None) -> dict[str, Any]:
    """What a plan records of the plain optimum (None each without a plain attempt)."""
    if plain is None:
        keys = ("plain_cost_per_hour", "plain_billed_per_hour", "plain_realised_worst_path_s")
        return {**dict.fromkeys(keys), "price_of_realisability": None}
    return {
        "plain_cost_per_hour": plain.plan.cost_per_hour,
        "plain_billed_per_hour": plain.plan.billed_per_hour,
        "plain_realised_worst_path_s": plain.over + problem.slo_s,
        "price_of_realisability": (best.cost - plain.cost) / plain.cost if plain.cost > 0 else 0.0,
    }


def _assemble(
    problem: ProblemSpec,
    best: _Attempt,
    plain: _Attempt | None,
    searched: dict[str, Any] | None,
    *,
    child_headroom: float,
    rounds: int,
    solve_ms: float,
    cpu_ms: float,
) -> Plan:
    parents = topology(problem).parents
    plan = annotate(problem, best.plan, best.real)
    modules = {
        name: mp.model_copy(
            update={
                "child_headroom": child_headroom if parents[name] else 0.0,
                "planned_for_rate": best.rates[name],
                "single_config": name in best.only,
            }
        )
        for name, mp in plan.modules.items()
    }
    return plan.model_copy(
        update={
            "modules": modules,
            "solve_ms": solve_ms,
            "solve_cpu_ms": cpu_ms,
            "splitter_slo_s": best.splitter_slo,
            "dispatch_rounds": rounds,
            "child_headroom": child_headroom,
            **_plain_figures(problem, best, plain),
            "dispatch_search": searched,
        }
    )
