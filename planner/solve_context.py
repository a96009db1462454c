"""The solve's context and its module-level steps, shared by the split methods of :mod:`planner.solve`.

Holds :class:`BilledCache` (per-module billed optima and configurations kept between solves;
re-exported by :mod:`planner.solve`), the per-solve context ``_Ctx`` and its set-up (configurations
filtered per policy, the feasibility check), each module scheduled within a budget (the policy's
module method, the billed optimum with its interval cache) and the assembly of a split: budgets to
schedules, leftover latency reassigned, the objective's total.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from planner.errors import InfeasibleError
from planner.latency import EPS, Config, Group, configs_for
from planner.module import (
    BilledConfigs,
    ModuleSchedule,
    algorithm1,
    fill_machines,
    harpagon_dummy,
    occupancy_optimal,
    piccolo_dummy,
)
from planner.split import path_latency, topology

if TYPE_CHECKING:
    from collections.abc import Callable

    from planner.models import HardwareSpec, Objective, ProblemSpec, ProfileEntry
    from planner.policies import PolicySpec

__all__ = ["BilledCache"]

_Billed = tuple[ModuleSchedule | None, bool]


class _BilledTable:
    """One module's results in a :class:`BilledCache`: exact (rate, budget) -> result, and per rate the
    budget spans ``[l, L]`` over which a proven optimum found for budget ``L`` (worst case ``l``) is the
    optimum."""

    __slots__ = ("configs", "exact", "spans")

    def __init__(self, configs: BilledConfigs) -> None:
        self.configs = configs  # the module's configurations, prepared once for all its searches
        self.exact: dict[tuple[float, float], _Billed] = {}
        self.spans: dict[float, list[tuple[float, float, _Billed]]] = {}

    def get(self, rate: float, budget: float) -> _Billed | None:
        found = self.exact.get((rate, budget))
        if found is not None:
            return found
        for lo, hi, result in self.spans.get(rate, ()):
            if lo - 1e-12 <= budget <= hi + 1e-12:
                return result
        return None


class _ModuleRecord:
    """One module's configurations in a :class:`BilledCache`, for the profile list they came from: the
    entries and hardware specs they were read from (to check that the list still holds them) and the
    module's billed table (found on first use)."""

    __slots__ = ("configs", "entries", "hardware", "profile", "table")

    def __init__(
        self,
        profile: list[ProfileEntry],
        hardware: dict[str, HardwareSpec],
        configs: list[Config],
    ) -> None:
        self.profile = profile
        self.entries = tuple(profile)
        self.hardware = tuple((h, hardware[h]) for h in dict.fromkeys(e.hardware for e in profile))
        self.configs = tuple(configs)
        self.table: _BilledTable | None = None

    def holds(self, profile: list[ProfileEntry], hardware: dict[str, HardwareSpec]) -> bool:
        """Whether :func:`configs_for` would read exactly what it read here: the same list holding the
        same entry objects, and the same hardware spec objects (frozen models: equal fields)."""
        return (
            profile is self.profile
            and len(profile) == len(self.entries)
            and all(map(operator.is_, profile, self.entries))
            and all(hardware.get(h) is spec for h, spec in self.hardware)
        )


class BilledCache:
    """Results kept between :func:`~planner.solve.solve` calls (e.g. the rounds of
    :func:`planner.robust.solve_dispatchable`, which solve variants of one problem and ask for the same
    module optima again); it changes only the time a solve takes, never its plan.

    - :func:`~planner.module.billed_optimal` results, keyed on every argument the search reads: the
      module's configurations (hardware, batch, concurrency, duration, price and overhead of each, in
      order), its
      rate and the budget. A proven optimum found for budget ``L`` with worst case ``l`` also answers
      every budget in ``[l, L]``: the plans feasible there are a subset of those feasible at ``L`` that
      still holds it (the same rule :func:`_billed_optimal` applies within one solve);
    - each module's configurations (:func:`configs_for`), per profile list: the variants a round
      solves share their modules' profile lists (``model_copy`` keeps them), and a list that still
      holds the same frozen entries, priced by the same frozen hardware specs, gives the same
      configurations (:meth:`_ModuleRecord.holds` checks it, by identity: no hashing of the entries).

    Holds at most ``max_entries`` results (then it starts again empty)."""

    def __init__(self, max_entries: int = 50_000) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self._by_configs: dict[tuple[Config, ...], _BilledTable] = {}
        self._modules: dict[int, _ModuleRecord] = {}  # id(profile list) -> its record (which holds it)
        self._size = 0
        self.hits = self.misses = 0

    def module(self, profile: list[ProfileEntry], hardware: dict[str, HardwareSpec]) -> _ModuleRecord:
        """The record of one module's profile: its configurations (:func:`configs_for`)."""
        found = self._modules.get(id(profile))
        if found is None or not found.holds(profile, hardware):
            if len(self._modules) >= self.max_entries:
                self._modules = {}
            found = self._modules[id(profile)] = _ModuleRecord(
                profile, hardware, configs_for(profile, hardware)
            )
        return found

    def table(self, configs: list[Config] | tuple[Config, ...]) -> _BilledTable:
        """The results for one module's configurations (looked up once per solve: hashing the
        configurations costs more than the inner lookups)."""
        key = tuple(configs)
        found = self._by_configs.get(key)
        if found is None:
            found = self._by_configs[key] = _BilledTable(BilledConfigs(key))
        return found

    def put(self, table: _BilledTable, rate: float, budget: float, value: _Billed) -> None:
        if self._size >= self.max_entries:  # start again (a table already handed out serves only its solve)
            self._by_configs = {}
            self._modules = {}  # their records hold tables
            self._size = 0
        table.exact[(rate, budget)] = value
        sched, proven = value
        if proven:
            lo = sched.wcl if sched is not None else -math.inf
            table.spans.setdefault(rate, []).append((lo, budget, value))
        self._size += 1

    def __len__(self) -> int:
        return self._size


@dataclass
class _Ctx:
    names: list[str]
    rate: list[float]
    configs: list[list[Config]]
    paths: list[list[int]]
    parents: list[frozenset[int]]
    children: list[frozenset[int]]
    slo: float
    policy: PolicySpec
    objective: Objective
    cache: dict[tuple[int, float], ModuleSchedule | None] = field(default_factory=dict)
    billed: dict[int, list[tuple[float, float, ModuleSchedule | None]]] = field(default_factory=dict)
    proven: bool = True
    memo: BilledCache | None = None  # billed_optimal results shared with other solves
    tables: dict[int, _BilledTable] = field(default_factory=dict)
    prepared: dict[int, BilledConfigs] = field(default_factory=dict)  # without a memo
    records: list[_ModuleRecord | None] = field(default_factory=list)  # per module, unfiltered configs
    floors: list[float] | None = None  # per module: _min_latency
    should_stop: Callable[[], bool] | None = None  # the caller's budget, read by the large searches
    warm_configs: list[list[Config]] = field(default_factory=list)  # the large searches' warm starts
    warm_billed: list[tuple[list[ModuleSchedule], list[float]]] = field(default_factory=list)
    lower_bound: float | None = None  # a certified bound on the optimum, where the search gives one
    price_classes: bool = False  # billed module searches cut by the price classes too (5+ modules)
    node_limit: int = 200_000  # per billed module search (5+ modules: LARGE_NODE_LIMIT)

    @property
    def n(self) -> int:
        return len(self.names)


# --------------------------------------------------------------------------- set-up


def _context(
    problem: ProblemSpec,
    policy: PolicySpec,
    objective: Objective,
    only_hw: str | None,
    memo: BilledCache | None = None,
) -> _Ctx:
    topo = topology(problem)
    names = list(topo.order)
    index = {m: i for i, m in enumerate(names)}
    configs: list[list[Config]] = []
    records: list[_ModuleRecord | None] = []
    for m in names:
        profile = problem.modules[m].profile
        record = memo.module(profile, problem.hardware) if memo is not None else None
        cs = list(record.configs) if record is not None else configs_for(profile, problem.hardware)
        unfiltered = len(cs)
        if not policy.batching:
            smallest = min(c.batch for c in cs)
            cs = [c for c in cs if c.batch == smallest]
        if policy.hardware in ("cheapest", "priciest"):
            prices = {c.price for c in cs}
            pick = min(prices) if policy.hardware == "cheapest" else max(prices)
            cs = [c for c in cs if c.price == pick]
        if only_hw is not None and any(c.hardware == only_hw for c in cs):
            cs = [c for c in cs if c.hardware == only_hw]
        configs.append(cs)
        records.append(record if len(cs) == unfiltered else None)  # its table is for all configurations
    parents = [frozenset(index[p] for p in topo.parents[m]) for m in names]
    children = [frozenset(index[c] for c in topo.children[m]) for m in names]
    return _Ctx(
        names=names,
        rate=[problem.modules[m].rate for m in names],
        configs=configs,
        paths=[[index[m] for m in p] for p in topo.paths],
        parents=parents,
        children=children,
        slo=problem.slo_s,
        policy=policy,
        objective=objective,
        memo=memo,
        records=records,
    )


def _min_latency(ctx: _Ctx, i: int) -> float:
    """Infimum of module i's worst case under the policy's latency model (TC: d + o, with enough load).
    Computed once per context (for every module: each lies on a path, which the feasibility check
    reads first); the configurations and the model do not change within a solve."""
    floors = ctx.floors
    if floors is None:
        if ctx.policy.model == "tc":
            floors = [min(c.floor for c in cs) for cs in ctx.configs]
        else:
            floors = [min(c.floor + c.batch / c.throughput for c in cs) for cs in ctx.configs]
        ctx.floors = floors
    return floors[i]


def _check_feasible(ctx: _Ctx) -> None:
    worst: tuple[float, list[int]] | None = None
    for p in ctx.paths:
        need = sum(_min_latency(ctx, i) for i in p)
        if worst is None or need - ctx.slo > worst[0] - ctx.slo:
            worst = (need, p)
    assert worst is not None
    need, p = worst
    strict = ctx.policy.model == "tc"  # under TC the infimum d is approached, never reached
    if need > ctx.slo + EPS or (strict and need >= ctx.slo - EPS):
        names = tuple(ctx.names[i] for i in p)
        raise InfeasibleError(
            f"infeasible: path {' -> '.join(names)} needs more than {need:.4g} s under "
            f"{ctx.policy.model.upper()} dispatch, SLO is {ctx.slo:.4g} s",
            path=names,
            min_latency_s=need,
        )


# --------------------------------------------------------------------------- module level


def _single(ctx: _Ctx, i: int, c: Config) -> tuple[float, float]:
    """(latency, cost) of module i run entirely on config c (Algorithm 2's view)."""
    rate = ctx.rate[i]
    n = max(1, math.ceil(rate / c.throughput - 1e-9))
    if ctx.policy.model == "tc":
        lat = c.tc_latency(rate)
    elif ctx.policy.model == "rr":
        lat = c.floor + c.batch / (rate / n)
    else:
        lat = c.floor + c.batch / c.throughput
    cost = c.price * rate / c.throughput if ctx.objective == "occupancy" else c.price * n
    return lat, cost


def _one_config_schedule(ctx: _Ctx, i: int, c: Config) -> ModuleSchedule:
    rate = ctx.rate[i]
    n = max(1, math.ceil(rate / c.throughput - 1e-9))
    lat, _ = _single(ctx, i, c)
    sched = ModuleSchedule((Group(c, n, rate / n),), rate, lat, ctx.policy.model)
    return fill_machines(sched) if ctx.objective == "billed" else sched


def _schedule(ctx: _Ctx, i: int, budget: float) -> ModuleSchedule | None:
    key = (i, round(budget, 12))
    if key in ctx.cache:
        return ctx.cache[key]
    pol, cs, rate = ctx.policy, ctx.configs[i], ctx.rate[i]
    sched: ModuleSchedule | None
    if pol.module == "exact":
        if ctx.objective == "occupancy":
            sched = occupancy_optimal(cs, rate, budget)
        else:
            sched = _billed_optimal(ctx, i, budget)
    else:
        sched = algorithm1(cs, rate, budget, pol.model, pol.max_configs)
        if pol.dummy in ("harpagon", "both"):
            sched = _harpagon_dummy(ctx, i, sched, budget)
        if sched is not None and pol.dummy in ("piccolo", "both"):
            sched = piccolo_dummy(cs, sched, budget, ctx.objective, pol.model, pol.max_configs)
        if sched is not None and ctx.objective == "billed":
            sched = fill_machines(sched)
    ctx.cache[key] = sched
    return sched


def _billed_optimal(ctx: _Ctx, i: int, budget: float) -> ModuleSchedule | None:
    """:func:`billed_optimal` with an interval cache: the optimum found for budget L, whose worst
    case is l, is also the optimum for every budget in [l, L] (cost is non-increasing in budget)."""
    for lo, hi, sched in ctx.billed.get(i, []):
        if lo - 1e-12 <= budget <= hi + 1e-12:
            return sched
    sched, proven = _billed_search(ctx, i, budget)
    ctx.proven &= proven
    if proven:
        lo = sched.wcl if sched is not None else -math.inf
        ctx.billed.setdefault(i, []).append((lo, budget, sched))
    return sched


def _billed_search(ctx: _Ctx, i: int, budget: float) -> _Billed:
    """:func:`billed_optimal` of module i, through the shared :class:`BilledCache` if there is one."""
    if ctx.memo is None:
        prepared = ctx.prepared.get(i)
        if prepared is None:
            prepared = ctx.prepared[i] = BilledConfigs(ctx.configs[i])
        return prepared.optimal(ctx.rate[i], budget, ctx.node_limit, price_classes=ctx.price_classes)
    table = ctx.tables.get(i)
    if table is None:
        record = ctx.records[i] if ctx.records else None
        table = record.table if record is not None else None
        if table is None:
            table = ctx.memo.table(ctx.configs[i])
            if record is not None:
                record.table = table
        ctx.tables[i] = table
    found = table.get(ctx.rate[i], budget)
    if found is not None:
        ctx.memo.hits += 1
        return found
    ctx.memo.misses += 1
    result = table.configs.optimal(ctx.rate[i], budget, ctx.node_limit, price_classes=ctx.price_classes)
    ctx.memo.put(table, ctx.rate[i], budget, result)
    return result


def _harpagon_dummy(ctx: _Ctx, i: int, sched: ModuleSchedule | None, budget: float) -> ModuleSchedule | None:
    pol, cs, rate = ctx.policy, ctx.configs[i], ctx.rate[i]
    if sched is not None:
        return harpagon_dummy(cs, sched, budget, ctx.objective, pol.model, pol.max_configs)
    # Algorithm 1 found no configuration for the residual: top the load up to whole machines of
    # some configuration (t - u with u the residual) and retry.
    cands = []
    for c in cs:
        alt = algorithm1(
            cs, math.ceil(rate / c.throughput - 1e-9) * c.throughput, budget, pol.model, pol.max_configs
        )
        if alt is not None:
            cands.append(ModuleSchedule(alt.groups, rate, alt.wcl, pol.model))
    return min(cands, key=lambda s: (s.cost(ctx.objective), s.wcl)) if cands else None


# --------------------------------------------------------------------------- assembly


def _reassign(ctx: _Ctx, scheds: list[ModuleSchedule], budgets: list[float]) -> None:
    """Harpagon's latency reassigner: give a module the path slack it can use and keep the new
    schedule when it is cheaper. ``all`` repeats until nothing improves; ``one`` does one module."""
    mode = ctx.policy.reassign
    if mode == "none":
        return
    while True:
        lat = [s.wcl for s in scheds]
        room = [ctx.slo - sum(lat[j] for j in p) for p in ctx.paths]  # each path's slack, once a pass
        best: tuple[float, int, ModuleSchedule, float] | None = None
        for i in range(ctx.n):
            slack = min(r for r, p in zip(room, ctx.paths, strict=True) if i in p)
            if slack <= 1e-7:
                continue
            alt = _schedule(ctx, i, lat[i] + slack)
            if alt is None:
                continue
            saved = scheds[i].cost(ctx.objective) - alt.cost(ctx.objective)
            if saved > EPS and (best is None or saved > best[0]):
                best = (saved, i, alt, lat[i] + slack)
        if best is None:
            return
        _, i, alt, budget = best
        scheds[i], budgets[i] = alt, budget
        if mode == "one":
            return


def _finish(
    ctx: _Ctx, budgets: list[float], fallback: list[Config] | None = None
) -> tuple[list[ModuleSchedule], list[float]] | None:
    scheds: list[ModuleSchedule] = []
    budgets = list(budgets)
    for i in range(ctx.n):
        s = _schedule(ctx, i, budgets[i])
        if s is None and fallback is not None:
            s = _one_config_schedule(ctx, i, fallback[i])
        if s is None:
            return None
        scheds.append(s)
    if path_latency([s.wcl for s in scheds], ctx.paths) > ctx.slo + EPS:
        return None
    _reassign(ctx, scheds, budgets)
    return scheds, budgets


def _total(ctx: _Ctx, result: tuple[list[ModuleSchedule], list[float]] | None) -> float:
    if result is None:
        return math.inf
    return sum(s.cost(ctx.objective) for s in result[0])
