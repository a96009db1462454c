"""Plan a problem under a policy and an objective: the planner's entry point.

The flow for every policy: filter each module's configurations (hardware, batching), split the
SLO into per-module budgets, schedule each module within its budget, reassign leftover latency,
and assemble the :class:`~planner.models.Plan`. The ``skinflint`` policy replaces the heuristics
by exact methods: for occupancy, branch and bound over one configuration per module with an exact
convex latency split; for billed, exact per-module cost staircases (branch and bound over machine
counts) combined by branch and bound over the DAG's paths.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Literal, TypeVar

import numpy as np

from planner.convex import path_lower_bound, split_convex
from planner.errors import InfeasibleError
from planner.lagrange import solve_choice, solve_occupancy
from planner.latency import EPS, Config, Group
from planner.models import MachineGroup, ModulePlan, Plan
from planner.module import (
    BilledConfigs,
    ModuleSchedule,
    fill_machines,
    occupancy_optimal,
)
from planner.policies import get_policy
from planner.reference import exhaustive_billed
from planner.solve_context import (
    BilledCache,
    _billed_optimal,
    _BilledTable,
    _check_feasible,
    _context,
    _Ctx,
    _finish,
    _min_latency,
    _reassign,
    _schedule,
    _single,
    _total,
)
from planner.split import ListSource, Option, combine, even_split, iterative_split, path_latency

if TYPE_CHECKING:
    from collections.abc import Callable

    from planner.models import Objective, ProblemSpec

__all__ = ["BilledCache", "module_plan", "solve"]

T = TypeVar("T")

STAIRCASE_LIMIT = 400  # staircase points per module before the exact search gives up


# --------------------------------------------------------------------------- split methods


def _start(ctx: _Ctx) -> list[Config]:
    """Algorithm 2's default DAG: batch 1 (smallest) on the priciest hardware; if that misses the
    SLO, each module's fastest configuration."""
    start = []
    for i in range(ctx.n):
        top = max(c.price for c in ctx.configs[i])
        cands = [c for c in ctx.configs[i] if c.price == top]
        start.append(min(cands, key=lambda c: (c.batch, c.concurrency, _single(ctx, i, c)[0])))
    if path_latency([_single(ctx, i, c)[0] for i, c in enumerate(start)], ctx.paths) <= ctx.slo + EPS:
        return start
    return [_fastest(ctx, i) for i in range(ctx.n)]


def _fastest(ctx: _Ctx, i: int) -> Config:
    return min(ctx.configs[i], key=lambda c: _single(ctx, i, c)[0])


def _heuristic(ctx: _Ctx) -> tuple[list[ModuleSchedule], list[float]] | None:
    pol = ctx.policy
    if pol.split == "even":
        return _finish(ctx, even_split(ctx.n, ctx.paths, ctx.slo))
    if pol.split == "quantized":
        return _quantized(ctx)
    start = _start(ctx)
    if path_latency([_single(ctx, i, c)[0] for i, c in enumerate(start)], ctx.paths) > ctx.slo + EPS:
        return None
    select: Literal["lc", "tb", "greedy"] = pol.split if pol.split in ("lc", "tb", "greedy") else "lc"
    cands = iterative_split(
        ctx.configs,
        lambda i, c: _single(ctx, i, c),
        start,
        ctx.paths,
        ctx.slo,
        select,
        ctx.parents,
        ctx.children,
        merge=pol.merger and select == "lc",
        cost_direct=pol.cost_direct if select == "lc" else 0,
    )
    results = [_finish(ctx, [_single(ctx, i, a[i])[0] for i in range(ctx.n)], a) for a in cands]
    return min(results, key=lambda r: _total(ctx, r))


def _quantized(ctx: _Ctx) -> tuple[list[ModuleSchedule], list[float]] | None:
    """Nexus-style split: budgets restricted to multiples of the quantum, combined exactly."""
    q = max(ctx.policy.quantum_s, ctx.slo / 200)
    steps = int(ctx.slo / q + 1e-9)
    options: list[list[Option[tuple[float, ModuleSchedule]]]] = []
    for i in range(ctx.n):
        opts = []
        for k in range(1, steps + 1):
            s = _schedule(ctx, i, k * q)
            if s is not None:
                opts.append(Option(k * q, s.cost(ctx.objective), (k * q, s)))
        options.append(_pareto(opts))
    choice, proven = combine([ListSource(o) for o in options], ctx.paths, ctx.slo + EPS)
    ctx.proven &= proven
    if choice is None:
        return None
    scheds = [o.payload[1] for o in choice]
    budgets = [o.payload[0] for o in choice]
    _reassign(ctx, scheds, budgets)
    return scheds, budgets


def _pareto(opts: list[Option[T]]) -> list[Option[T]]:
    """Keep options not dominated in (latency, cost)."""
    out: list[Option[T]] = []
    for o in sorted(opts, key=lambda o: (o.latency, o.cost)):
        if not out or o.cost < out[-1].cost - EPS:
            out.append(o)
    return out


def _max_budget(ctx: _Ctx, i: int) -> float:
    return min(ctx.slo - sum(_min_latency(ctx, j) for j in p if j != i) for p in ctx.paths if i in p)


class _OccupancySearch:
    """Branch and bound over one configuration per module; each leaf is an exact convex split."""

    def __init__(self, ctx: _Ctx, exhaustive: bool):
        self.ctx, self.rates = ctx, ctx.rate
        share = _proportional_budgets(ctx)
        self.cands: list[list[Config]] = []
        for i in range(ctx.n):
            cs = [c for c in ctx.configs[i] if c.floor < _max_budget(ctx, i)]
            if not exhaustive:
                cs = _undominated(cs, ctx.rate[i])
            # cheapest at a fair share of the SLO first: early leaves are near-optimal bounds
            rate, budget = self.rates[i], share[i]
            cs.sort(key=lambda c: (max(rate, c.min_rate(budget)) / c.ratio, rate / c.ratio))  # noqa: B023
            self.cands.append(cs)
        min_a = [
            min((self.rates[i] / c.ratio for c in cs), default=math.inf) for i, cs in enumerate(self.cands)
        ]
        self.rest = [sum(min_a[i:]) for i in range(ctx.n + 1)]
        self.dmin = [min((c.floor for c in cs), default=math.inf) for cs in self.cands]  # d + o
        self.best: tuple[float, list[Config], list[float]] | None = None
        self.pick: list[Config] = []

    def _arrays(self) -> tuple[list[float], list[float]]:
        beta = [c.batch / c.ratio for c in self.pick]
        u = [c.batch / self.rates[j] for j, c in enumerate(self.pick)]
        return beta, u

    def _partial_bound(self, i: int) -> float:
        """Relaxation of the subtree below pick[0..i]: unassigned modules at their cheapest flat
        cost and smallest latency floor d + o, single-path constraints on the assigned ones."""
        ctx = self.ctx
        sub = [[j for j in p if j <= i] for p in ctx.paths]
        room = [ctx.slo - sum(self.pick[j].floor if j <= i else self.dmin[j] for j in p) for p in ctx.paths]
        beta, u = self._arrays()
        return path_lower_bound(beta, u, sub, room, pairs=False) + self.rest[i + 1]

    def _leaf(self) -> None:
        ctx = self.ctx
        beta, u = self._arrays()
        room = [ctx.slo - sum(self.pick[j].floor for j in p) for p in ctx.paths]
        best = self.best[0] if self.best is not None else math.inf
        if path_lower_bound(beta, u, ctx.paths, room, best) >= best - EPS:
            return
        x = split_convex(beta, u, ctx.paths, room)
        if x is None:
            return
        cost = sum(b / min(xx, uu) for b, xx, uu in zip(beta, x, u, strict=True))
        if cost < best - EPS:
            self.best = (cost, list(self.pick), x)

    def dfs(self, i: int, lb: float) -> None:
        ctx = self.ctx
        if i == ctx.n:
            self._leaf()
            return
        for c in self.cands[i]:
            a = self.rates[i] / c.ratio
            best = self.best[0] if self.best is not None else math.inf
            if lb + a + self.rest[i + 1] >= best - EPS:
                continue
            self.pick.append(c)
            fits = all(
                sum(self.pick[j].floor if j <= i else self.dmin[j] for j in p) < ctx.slo for p in ctx.paths
            )
            if fits and (i == ctx.n - 1 or self._partial_bound(i) < best - EPS):
                self.dfs(i + 1, lb + a)
            self.pick.pop()


def _exact_occupancy(ctx: _Ctx, exhaustive: bool) -> tuple[list[ModuleSchedule], list[float]] | None:
    """Exact occupancy optimum. ``exhaustive`` (the reference) skips the dominance filter."""
    search = _OccupancySearch(ctx, exhaustive)
    search.dfs(0, 0.0)
    if search.best is None:
        return None
    scheds, budgets = [], []
    for i, (c, x) in enumerate(zip(search.best[1], search.best[2], strict=True)):
        w = max(ctx.rate[i], c.batch / x)
        m = max(1, math.ceil(w / c.throughput - 1e-9))
        scheds.append(ModuleSchedule((Group(c, m, w / m),), ctx.rate[i], c.tc_latency(w), "tc"))
        budgets.append(c.floor + x)
    return scheds, budgets


LARGE = 5  # modules from which the exact policies use the Lagrangian searches (the 1-4-module paths stay)
LARGE_NODE_LIMIT = 1_000_000  # per billed module search there (with the price classes' bound)


def _exact_occupancy_large(ctx: _Ctx) -> tuple[list[ModuleSchedule], list[float]] | None:
    """Exact occupancy optimum of a DAG of :data:`LARGE` or more modules (:mod:`planner.lagrange`):
    the same candidates as :class:`_OccupancySearch` (floor below the module's largest budget, the
    dominance filter), started from the configuration each module's proportional budget prefers (and
    the caller's warm start, if any)."""
    lmax = [_max_budget(ctx, i) for i in range(ctx.n)]
    cands = [
        _undominated([c for c in ctx.configs[i] if c.floor < lmax[i]], ctx.rate[i]) for i in range(ctx.n)
    ]
    share = _proportional_budgets(ctx)
    start: list[Config] = []
    for i in range(ctx.n):
        sched = occupancy_optimal(cands[i], ctx.rate[i], share[i])
        if sched is None:
            break
        start.append(sched.groups[0].config)
    starts = [start] if len(start) == ctx.n else []
    starts += ctx.warm_configs
    result = solve_occupancy(cands, ctx.rate, ctx.paths, ctx.slo, lmax, starts, ctx.should_stop)
    ctx.proven &= result.finished
    ctx.lower_bound = result.lower_bound
    if result.configs is None or result.x is None:
        return None
    scheds, budgets = [], []
    for i, (c, x) in enumerate(zip(result.configs, result.x, strict=True)):
        w = max(ctx.rate[i], c.batch / x)
        m = max(1, math.ceil(w / c.throughput - 1e-9))
        scheds.append(ModuleSchedule((Group(c, m, w / m),), ctx.rate[i], c.tc_latency(w), "tc"))
        budgets.append(c.floor + x)
    return scheds, budgets


def _undominated(cs: list[Config], rate: float) -> list[Config]:
    """Drop configs whose cost curve max(T/r, b/(r(l-d))) lies above another's everywhere: another
    config has flat cost T/r, slope b/r and latency floor d + o all no larger (and one smaller, or equal
    keys earlier in the list)."""
    if len(cs) < 2:
        return list(cs)
    keys = np.array([(rate / c.ratio, c.batch / c.ratio, c.floor) for c in cs])
    le = (keys[:, None, :] <= keys[None, :, :]).all(axis=2)  # le[j, i]: j <= i in every key
    lt = (keys[:, None, :] < keys[None, :, :]).any(axis=2)
    earlier = np.tri(len(cs), k=-1, dtype=bool).T  # earlier[j, i]: j < i
    dominated = [bool(v) for v in np.asarray((le & (lt | earlier)).any(axis=0)).ravel()]
    return [c for c, d in zip(cs, dominated, strict=True) if not d]


class _Stairs:
    """Module i's exact billed cost curve, step by step on demand: point k is the cheapest plan
    whose worst case is below point k-1's (lexicographic (cost, latency) optimum each time)."""

    def __init__(self, ctx: _Ctx, i: int, lmax: float):
        self.ctx, self.i, self.lmax = ctx, i, lmax
        self.floor = _min_latency(ctx, i)
        self.points: list[Option[ModuleSchedule]] = []
        self.exhausted = False

    def get(self, k: int, cap: float) -> Option[ModuleSchedule] | None:
        """Point k if it exists and costs at most ``cap``."""
        points = self.points
        if k < len(points):  # generated already (most calls): what the end of the generation reads
            point = points[k]
            return point if point.cost <= cap + EPS else None
        while len(self.points) <= k and not self.exhausted:
            if len(self.points) >= STAIRCASE_LIMIT:
                self.ctx.proven = False
                self.exhausted = True
                break
            if self.points and self.points[-1].cost > cap + EPS:
                return None  # later points cost more still
            budget = self.points[-1].latency - 1e-7 if self.points else self.lmax
            s = _billed_optimal(self.ctx, self.i, budget)
            if s is None:
                self.exhausted = True
            else:
                self.points.append(Option(s.wcl, s.billed, s))
        if k < len(self.points) and self.points[k].cost <= cap + EPS:
            return self.points[k]
        return None

    def min_latency(self) -> float:
        return self.floor


def _exact_billed(ctx: _Ctx) -> tuple[list[ModuleSchedule], list[float]] | None:
    """Exact billed optimum: per-module staircases, generated lazily, combined by branch and bound
    (:func:`~planner.split.combine`) from an incumbent with proportional budgets."""
    incumbent = _proportional(ctx)
    stairs = [_Stairs(ctx, i, _max_budget(ctx, i)) for i in range(ctx.n)]
    choice, proven = combine(stairs, ctx.paths, ctx.slo, bound=_total(ctx, incumbent))
    ctx.proven &= proven
    if choice is None:
        return incumbent
    scheds = [o.payload for o in choice]
    return scheds, _spread_slack(ctx, [s.wcl for s in scheds])


def _billed_capped(
    ctx: _Ctx, i: int, budget: float, cap: float, hint: ModuleSchedule | None = None
) -> ModuleSchedule | None:
    """Module i's billed optimum at ``budget`` if it bills at most ``cap`` (else None): the interval
    cache, then :meth:`BilledConfigs.optimal` started from ``cap`` (a plan it finds is the optimum, and
    is cached as :func:`_billed_optimal` caches one)."""
    for lo, hi, sched in ctx.billed.get(i, []):
        if lo - 1e-12 <= budget <= hi + 1e-12:
            return sched if sched is not None and sched.billed <= cap + EPS else None
    table: _BilledTable | None = None
    if ctx.memo is None:
        prepared = ctx.prepared.get(i)
        if prepared is None:
            prepared = ctx.prepared[i] = BilledConfigs(ctx.configs[i])
    else:
        record = ctx.records[i] if ctx.records else None
        table = ctx.tables.get(i) or (record.table if record is not None else None)
        if table is None:
            table = ctx.memo.table(ctx.configs[i])
            if record is not None:
                record.table = table
        ctx.tables[i] = table
        found = table.get(ctx.rate[i], budget)
        if found is not None:
            ctx.memo.hits += 1
            sched = found[0]
            return sched if sched is not None and sched.billed <= cap + EPS else None
        prepared = table.configs
    sched, proven = prepared.optimal(
        ctx.rate[i],
        budget,
        ctx.node_limit,
        cap=cap,
        hint=hint.groups if hint else (),
        price_classes=ctx.price_classes,
    )
    ctx.proven &= proven
    if sched is not None and proven:
        ctx.billed.setdefault(i, []).append((sched.wcl, budget, sched))
        if table is not None and ctx.memo is not None:
            ctx.memo.misses += 1
            ctx.memo.put(table, ctx.rate[i], budget, (sched, proven))
    return sched


def _exact_billed_large(ctx: _Ctx) -> tuple[list[ModuleSchedule], list[float]] | None:
    """Exact billed optimum of a DAG of :data:`LARGE` or more modules: each module's staircase (its
    exact cost curve, as :class:`_Stairs` generates it) down to the cost that can still be part of a
    plan cheaper than the incumbent (the incumbent less the other modules' cheapest points; each step a
    module search started from that cap, so proving that no cheaper point is left costs little), then
    one point per module chosen by the Lagrangian branch and bound of
    :func:`planner.lagrange.solve_choice`."""
    incumbent = _proportional(ctx)
    for warm in ctx.warm_billed:
        if _total(ctx, warm) < _total(ctx, incumbent) - EPS:
            incumbent = warm
    upper = _total(ctx, incumbent)
    stairs: list[list[ModuleSchedule]] = []
    for i in range(ctx.n):
        first = _billed_optimal(ctx, i, _max_budget(ctx, i))
        if first is None:
            return incumbent
        stairs.append([first])
    cheapest = sum(st[0].billed for st in stairs)
    cut: list[bool] = []  # per module: its staircase cut short by the caller's budget
    for i, st in enumerate(stairs):
        cap = upper - (cheapest - st[0].billed) + EPS
        floor = _min_latency(ctx, i)
        stop = ctx.should_stop is not None and ctx.should_stop()
        proven = ctx.proven
        while not stop and st[-1].wcl - 1e-7 > floor:
            if len(st) >= STAIRCASE_LIMIT:
                ctx.proven = False
                break
            step = _billed_capped(ctx, i, st[-1].wcl - 1e-7, cap, st[-1])
            if step is None:
                break
            st.append(step)
            # a step stopped by its node limit: the next ones would be too (same module, tighter
            # budgets); the staircase ends in a tail option, the plan is no longer proven
            stop = proven and not ctx.proven
        cut.append(stop and st[-1].wcl - 1e-7 > floor)
    # a cut staircase ends in a tail option (the floor, at the last point's cost, which every point
    # not generated exceeds): the choice is then a relaxation, its bound still certified
    options = [
        [(s.wcl, s.billed) for s in st] + ([(_min_latency(ctx, i), st[-1].billed)] if cut[i] else [])
        for i, st in enumerate(stairs)
    ]
    searched = ctx.proven  # every module search finished (none stopped by its node limit)
    if any(cut):
        ctx.proven = False
    result = solve_choice(options, ctx.paths, ctx.slo, _start_points(stairs, incumbent), ctx.should_stop)
    # the bound holds for these staircases; a module search stopped by its node limit leaves a point
    # that may cost more than the module's optimum there, so then no bound is certified
    ctx.lower_bound = result.lower_bound if searched else math.nan
    ctx.proven &= result.finished
    if result.pick is None or any(k >= len(st) for st, k in zip(stairs, result.pick, strict=True)):
        return incumbent  # (a tail chosen: the incumbent, under the same bound)
    scheds = [st[k] for st, k in zip(stairs, result.pick, strict=True)]
    if incumbent is not None and _total(ctx, incumbent) < sum(s.billed for s in scheds) - EPS:
        return incumbent
    return scheds, _spread_slack(ctx, [s.wcl for s in scheds])


def _start_points(
    stairs: list[list[ModuleSchedule]], incumbent: tuple[list[ModuleSchedule], list[float]] | None
) -> list[int] | None:
    """Per module the cheapest generated point no slower than the incumbent's schedule (the incumbent
    as a choice of points: it costs no more), or None where some module has none generated yet."""
    if incumbent is None:
        return None
    start = []
    for st, sched in zip(stairs, incumbent[0], strict=True):
        fits = [k for k, point in enumerate(st) if point.wcl <= sched.wcl + EPS]
        if not fits:
            return None
        start.append(fits[0])
    return start


def _proportional_budgets(ctx: _Ctx) -> list[float]:
    """Budgets proportional to each module's least latency, scaled to fill its tightest path."""
    dmin = [_min_latency(ctx, i) for i in range(ctx.n)]
    return [
        dmin[i] * min(ctx.slo / sum(dmin[j] for j in p) for p in ctx.paths if i in p) for i in range(ctx.n)
    ]


def _proportional(ctx: _Ctx) -> tuple[list[ModuleSchedule], list[float]] | None:
    """A quick incumbent: proportional budgets, each module scheduled exactly, then latency
    reassignment."""
    return _finish(ctx, _proportional_budgets(ctx))


def _spread_slack(ctx: _Ctx, lat: list[float]) -> list[float]:
    """Budgets >= worst cases: each module also gets the slack of its tightest path."""
    return [
        lat[i] + max(0.0, min(ctx.slo - sum(lat[j] for j in p) for p in ctx.paths if i in p))
        for i in range(ctx.n)
    ]


# --------------------------------------------------------------------------- entry point


def _plan_ctx(ctx: _Ctx) -> tuple[list[ModuleSchedule], list[float]] | None:
    pol = ctx.policy
    if pol.split == "exhaustive":
        if ctx.objective == "occupancy":
            return _exact_occupancy(ctx, exhaustive=True)
        upper_bound = _total(ctx, _heuristic(ctx))
        scheds = exhaustive_billed(
            ctx.configs, ctx.rate, ctx.paths, ctx.slo, lambda i: _max_budget(ctx, i), upper_bound
        )
        return None if scheds is None else (scheds, _spread_slack(ctx, [sched.wcl for sched in scheds]))
    if pol.split == "exact":
        if ctx.objective == "occupancy":
            exact = _exact_occupancy_large(ctx) if ctx.n >= LARGE else _exact_occupancy(ctx, exhaustive=False)
        else:
            exact = _exact_billed_large(ctx) if ctx.n >= LARGE else _exact_billed(ctx)
        return exact if exact is not None else _heuristic(ctx)
    return _heuristic(ctx)


def solve(
    problem: ProblemSpec,
    policy: str = "skinflint",
    objective: Objective = "billed",
    *,
    cache: BilledCache | None = None,
    should_stop: Callable[[], bool] | None = None,
    warm_start: Plan | None = None,
) -> Plan:
    """Plan ``problem``: the cheapest plan the policy finds that meets the SLO on every path.

    Raises :class:`~planner.errors.InfeasibleError` (with the tightest path and its minimum
    latency) when the policy's latency model cannot meet the SLO. ``cache``: per-module billed optima
    shared with other solves (:class:`BilledCache`); it changes only the time taken, never the plan.

    On :data:`LARGE` or more modules the exact policies (``skinflint``) run the Lagrangian searches
    (:mod:`planner.lagrange`) and the plan also carries ``lower_bound_per_hour`` (a certified bound on
    the objective's optimum) and ``proven_gap`` ((cost - bound) / cost; 0 when proven optimal).
    ``should_stop``: the caller's budget (e.g. a CPU deadline), a callable the searches read every few
    nodes; once it returns True they stop with the best plan found (``proven_optimal`` false, the gap
    what the open nodes still allow). ``warm_start``: a previous plan of the same modules (e.g. the
    last epoch's), tried first as the incumbent where its configurations still serve the new rates
    within the SLO; it changes only the time taken, never the optimum.
    """
    started, cpu_started = time.perf_counter(), time.process_time()
    pol = get_policy(policy)
    hw_choices: list[str | None] = [None]
    if pol.hardware == "single":
        hw_choices = list(problem.hardware)
    best: tuple[float, _Ctx, tuple[list[ModuleSchedule], list[float]]] | None = None
    error: InfeasibleError | None = None
    for hw in hw_choices:
        ctx = _context(problem, pol, objective, hw, cache)
        ctx.should_stop = should_stop
        if pol.split == "exact" and ctx.n >= LARGE:
            ctx.price_classes, ctx.node_limit = True, LARGE_NODE_LIMIT
        try:
            _check_feasible(ctx)
            if warm_start is not None and ctx.n >= LARGE:
                _warm(ctx, warm_start)
        except InfeasibleError as exc:
            error = error or exc
            continue
        result = _plan_ctx(ctx)
        if result is not None and (best is None or _total(ctx, result) < best[0] - EPS):
            best = (_total(ctx, result), ctx, result)
    if best is None:
        if error is not None:
            raise error
        raise InfeasibleError(
            f"infeasible: policy {policy!r} found no plan within the SLO of {problem.slo_s:g} s"
        )
    _, ctx, (scheds, budgets) = best
    plan = _assemble(ctx, scheds, budgets, problem, (time.perf_counter() - started) * 1000)
    # CPU time too: on a shared machine wall time includes other processes' turns
    plan.model_extra["solve_cpu_ms"] = (time.process_time() - cpu_started) * 1000  # type: ignore[index]
    return plan


def _warm(ctx: _Ctx, plan: Plan) -> None:
    """The previous plan as warm starts: per module its groups' configurations at this problem's rates
    (occupancy: its single configuration; billed: the same machines, kept only if they still carry the
    rate and fit every path). Modules or configurations that no longer exist drop the warm start."""
    by_key = [{(c.hardware, c.batch, c.concurrency): c for c in cs} for cs in ctx.configs]
    picks: list[list[tuple[Config, int]]] = []
    for i, name in enumerate(ctx.names):
        mp = plan.modules.get(name)
        if mp is None or not mp.groups:
            return
        pick: list[tuple[Config, int]] = []
        for g in mp.groups:
            c = by_key[i].get((g.hardware, g.batch, g.concurrency))
            if c is None:
                return
            pick.append((c, g.machines))
        picks.append(pick)
    if ctx.objective == "occupancy":
        if all(len(p) == 1 for p in picks):
            ctx.warm_configs.append([p[0][0] for p in picks])
        return
    scheds = []
    for i, chosen in enumerate(picks):
        groups = [Group(c, m, c.throughput) for c, m in chosen]
        if sum(g.total for g in groups) < ctx.rate[i] - EPS:
            return
        scheds.append(fill_machines(ModuleSchedule(tuple(groups), ctx.rate[i], 0.0, "tc")))
    if path_latency([s.wcl for s in scheds], ctx.paths) <= ctx.slo + EPS:
        ctx.warm_billed.append((scheds, _spread_slack(ctx, [s.wcl for s in scheds])))


def module_plan(s: ModuleSchedule, budget_s: float) -> ModulePlan:
    """The plan of one module's schedule ``s`` (its budget at least its worst case), as a plan carries it."""
    return ModulePlan(
        latency_budget_s=max(budget_s, s.wcl),
        worst_case_latency_s=s.wcl,
        dummy_rate=s.dummy,
        groups=[
            MachineGroup(
                hardware=g.config.hardware,
                batch=g.config.batch,
                concurrency=g.config.concurrency,
                machines=g.machines,
                rate_per_machine=g.rate,
                duration_s=g.config.duration,
                overhead_s=g.config.overhead,
            )
            for g in s.groups
        ],
        rate=s.rate,
        occupancy_per_hour=s.occupancy,
        billed_per_hour=s.billed,
    )


def _assemble(
    ctx: _Ctx, scheds: list[ModuleSchedule], budgets: list[float], problem: ProblemSpec, solve_ms: float
) -> Plan:
    modules = {name: module_plan(scheds[i], budgets[i]) for i, name in enumerate(ctx.names)}
    lat = [s.wcl for s in scheds]
    plan = Plan(
        objective=ctx.objective,
        cost_per_hour=sum(s.occupancy for s in scheds),
        billed_per_hour=sum(s.billed for s in scheds),
        solve_ms=solve_ms,
        modules=modules,
        name=problem.name,
        policy=ctx.policy.name,
        latency_model=ctx.policy.model,
        slo_s=ctx.slo,
        paths=[
            {"modules": [ctx.names[i] for i in p], "worst_case_latency_s": sum(lat[i] for i in p)}
            for p in ctx.paths
        ],
        proven_optimal=ctx.policy.split in ("exact", "exhaustive") and ctx.proven,
    )
    if ctx.lower_bound is not None:  # the large searches' certificate (absent on 1-4 modules: unchanged)
        cost = plan.cost_per_hour if ctx.objective == "occupancy" else plan.billed_per_hour
        extra = plan.model_extra
        assert extra is not None
        if math.isnan(ctx.lower_bound):
            extra["lower_bound_per_hour"] = extra["proven_gap"] = None  # none certified
        else:
            bound = cost if ctx.proven else min(ctx.lower_bound, cost)
            extra["lower_bound_per_hour"] = bound
            extra["proven_gap"] = max(0.0, (cost - bound) / cost) if cost > 0 else 0.0
    return plan
