"""Branch and bound over realised plans: each module walks its cost staircase of configurations, realised
in topological order, until the work budget is spent."""

from __future__ import annotations

import bisect
import heapq
import math
import operator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from planner.latency import EPS, Group, worst_case
from planner.module import ModuleSchedule
from planner.robust.realisation import Realisation, children_per_request, realise_module, schedule_of
from planner.robust.spread import RATE_STEP, required_capacity, required_spread_rate
from planner.solve import module_plan
from planner.split import topology

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from planner.models import ModulePlan
    from planner.robust.search import Attempt, DispatchSearch

__all__ = ["RealisedSearch", "adopt_picks"]


_STAIR_STEP = 1e-7  # seconds: the next point of a module's cost staircase is this much faster


@dataclass
class _Pick:
    """One module's choice in :class:`RealisedSearch`."""

    rate: float  # the rate the module is planned for
    schedule: ModuleSchedule
    plan: ModulePlan
    real: Realisation
    streams: list[float]  # the spacing rates of the module's request streams (:func:`realise_module`)


class RealisedSearch:
    """Branch and bound over realised plans, choosing one plan per module in topological order.

    A module's realised figures depend only on its own plan and its ancestors' (:func:`realise_module`),
    so once its parents are chosen each of its options is realised exactly, at the rate its parents'
    bursts require (:func:`required_spread_rate`, :func:`required_capacity`; at least its rate times the
    child headroom) and within the budget its paths leave (the SLO minus the realised figures of the
    modules chosen on them and the smallest latency floors (d + o) of the modules after it). Options, cheapest
    first: a leaf's cost staircase (its billed optimum within the budget, then the cheapest strictly
    faster plan, ...; the first that is collision-free and fits is its best: a leaf changes nothing for
    the other modules); a module with children, every one-configuration plan (:meth:`_one_config`:
    several configurations complete batches at irregular times, which its children pay for, as
    :func:`_repair` forbids). The bound on the modules not chosen yet is, per module, its cheapest plan
    at its expected rate within what its paths leave (its parents chosen: also its required rate times
    its cheapest price per req/s). ``work_limit`` units of work (options examined plus plans realised)
    end the search early (``complete`` is then False); the answer depends on nothing but the problem,
    the bound and the limit (not on what the caches hold)."""

    def __init__(self, search: DispatchSearch, bound: float, child_headroom: float, work_limit: int) -> None:
        problem = search.problem
        topo = self.topo = topology(problem)
        self.search, self.problem, self.order = search, problem, topo.order
        index = self.index = {m: i for i, m in enumerate(topo.order)}
        self.parents = [tuple(topo.parents[m]) for m in topo.order]
        self.leaf = [not topo.children[m] for m in topo.order]
        self.paths = [[index[m] for m in path] for path in topo.paths]
        self.on = [[j for j, path in enumerate(self.paths) if i in path] for i in range(len(self.order))]
        self.prices = {h: hw.price_per_hour for h, hw in problem.hardware.items()}
        self.per_request = children_per_request(problem, search.fan_out)
        self.base = [problem.modules[m].rate for m in topo.order]
        self.least = [
            r * (1 + child_headroom) if ps else r for r, ps in zip(self.base, self.parents, strict=True)
        ]
        configs = [
            search.billed.module(search._profile(m, None, m in search.joins), problem.hardware).configs
            for m in topo.order
        ]
        self.tables = [search.billed.table(cs) for cs in configs]  # billed optima, shared with the rounds
        # d below: a configuration's latency floor, device time plus its latency-only overhead (d + o)
        self.rows = [[(c.floor, c.batch, c.throughput, c.price, c) for c in cs] for cs in configs]
        self.floor = [min(c.floor for c in cs) for cs in configs]  # below every Theorem-1 figure
        self.max_batch = [max(c.batch for c in cs) for cs in configs]
        # per module: floors ascending, and the cheapest price per req/s among configurations that fast
        self.units: list[tuple[list[float], list[float]]] = []
        for cs in configs:
            floors, unit, cheapest = [], [], math.inf
            for c in sorted(cs, key=lambda c: c.floor):
                cheapest = min(cheapest, c.price / c.throughput)
                floors.append(c.floor)
                unit.append(cheapest)
            self.units.append((floors, unit))
        slo, n = problem.slo_s, len(self.order)
        # rest[j][k]: the smallest floors (d + o) of path j's modules from module k on
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
        Theorem-1 figure ``d + o + b / (n t)`` is within the budget. Not only the cheapest per budget: a
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
        floors, unit = self.units[i]
        k = bisect.bisect_left(floors, budget)
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
        out = max(self.least[i], need * (1 + RATE_STEP)), burst
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
        sched = schedule_of(m, mp, self.prices, self.search.schedules)
        real, streams = realise_module(
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


def adopt_picks(search: DispatchSearch, good: Attempt, picks: Sequence[_Pick]) -> Attempt:
    """Keep the plan of :class:`RealisedSearch`'s ``picks`` (one per module, in topological order) as
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
