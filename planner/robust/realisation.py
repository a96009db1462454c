"""Realisation of a plan: each module's dispatch schedule, its realised worst case and the spread rates its
children need; :func:`annotate` writes the realised figures into the plan."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.dispatch import DispatchSchedule, build_schedule
from planner.robust.spread import RATE_STEP, required_capacity, required_spread_rate, share_spread_rates
from planner.split import Topology, topology

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from planner.models import ModulePlan, Plan, ProblemSpec

__all__ = [
    "FAN_OUT_KEY",
    "Realisation",
    "annotate",
    "children_per_request",
    "realise",
    "realise_module",
    "schedule_key",
    "schedule_of",
]

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


def children_per_request(
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
                g.overhead_s,
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
    per_request = children_per_request(problem, fan_out)
    topo = topology(problem)
    streams: dict[str, list[float]] = {}  # module -> spacing rates of its request streams
    out: dict[str, Realisation] = {}
    for name in topo.order:
        mp = plan.modules[name]
        sched = schedule_of(name, mp, prices, cache)
        out[name], streams[name] = realise_module(problem, topo, name, mp, sched, per_request, out, streams)
    return out


def schedule_of(
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


def realise_module(
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
        top = capacity * (1 - RATE_STEP)
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
