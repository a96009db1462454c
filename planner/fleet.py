"""One planning epoch for a fleet of apps: plan every app, shape the plans for packing, pack.

Every app is planned for billed cost (whole machines; under TC every machine runs at full throughput, the
excess as free dummy load). Under TC the plans are then shaped (:func:`shape_plan`) so that partial
machines appear where co-location can use them:

1. **Unfill**: a path's slack (SLO minus its planned worst case) is partly spent on longer collection
   times, i.e. less dummy load, so the last machine of a module becomes a partial share; the fraction
   ``keep`` of the slack stays for the added waits of co-location (docs/packing.md).
2. **Split residuals**: a module of ``k + rho`` machines' worth of load becomes ``k`` machines at full
   throughput plus one residual machine at ``t / q`` (``q = floor(1 / rho)``) whose windows are exactly
   periodic, so it may share an instance. The time-window dispatch guarantees ``d + 2 b / W`` for the full
   machines instead of ``d + b / W`` (docs/dispatch.md); a split is made only where the slack pays for it.

An epoch packs the plans shaped with each ``keep`` of :data:`KEEPS` (one-machine modules in aligned duty
cycles first, :func:`planner.packing.pack`; the plans then carry their phases) and keeps the cheapest
fleet (the previous epoch's ``keep`` unless another bills :data:`~planner.packing.REPACK_THRESHOLD`
less); modules whose shares all ended on instances of their own then go back to the plan as solved (full
machines: the same bill, a shorter worst case) and the fleet is packed once more.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import inspect
import itertools
import math
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from planner.check import check_plan
from planner.errors import PlannerError
from planner.models import MachineGroup, ModulePlan, Plan
from planner.packing import ALIGN_GUARD_S, REPACK_THRESHOLD, FleetPlan, Instance, Share, apply_phases, pack
from planner.solve import solve
from planner.split import topology

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from planner.dispatch import DispatchSchedule
    from planner.models import ProblemSpec
    from planner.robust import Realisation

    #: Module schedules by :func:`planner.robust.realise`'s cache key (module, groups, prices).
    Schedules = dict[tuple[object, ...], DispatchSchedule]

__all__ = [
    "EPOCH_GC_THRESHOLDS",
    "KEEPS",
    "REALISATIONS",
    "FleetPlan",
    "FleetResult",
    "Instance",
    "RealisationCache",
    "ScheduleSharingSolver",
    "Share",
    "plan_fleet",
    "problem_digest",
    "redispatch",
    "restore_modules",
    "seed_plan",
    "shape_plan",
]

#: Plan extra keys: the digest of the problem the plan was solved for, the solver's own plan (so a later
#: epoch can reshape without solving again), and the ``keep`` the plan was shaped with.
DIGEST_KEY = "problem_digest"
SHAPE_KEY = "problem_shape_digest"  # the problem with its rates left out
RATES_KEY = "solved_rates"  # module rates the plan was solved for
SOLVED_KEY = "solved_modules"
KEEP_KEY = "packing_keep"
#: Plan extra key of a plan carried over a change of its app's problem (:func:`plan_fleet`'s
#: ``solve_budget_s``): ``digest``, the problem digest it was solved for, and ``sticky``, whether only the
#: rates changed (it is then solved again as an epoch without a budget solves a plan its rates outgrew,
#: :func:`_sticky`). The app is solved again when the budget allows. A quick plan (the solver's first
#: realisable plan, made when a budgeted epoch has more apps without a plan than it can solve in full)
#: carries the same mark with ``quick: True`` and its own problem's digest.
CARRIED_KEY = "carried_from"
#: Module extra key of a residual split: the extra worst case of its full machines, b / W (s).
SPLIT_KEY = "split_penalty_s"
#: Garbage-collector thresholds during an epoch (at least these; restored after it). An epoch allocates
#: millions of short-lived objects and keeps tens of thousands (dispatch windows, plans): at the default
#: thresholds (700, 10, 10) the collector makes about 2,000 young and 15 full passes over them, about 1 s
#: of CPU on 100 apps; at these, about 20 young passes and no full one (0.2 s). Cyclic garbage still goes
#: with the young passes, so memory stays bounded.
EPOCH_GC_THRESHOLDS: tuple[int, int, int] = (50_000, 10, 100)

#: Fractions of the path slack kept for co-location waits that an epoch tries (1.0: plans as solved; 0.0:
#: all of it spent on partial machines, for aligned duty cycles, which need no slack). 0.5 and 0.25 were
#: tried too until they were measured: on the generated 100-app fleets (seeds 0-4, both solvers) they
#: never billed more than 0.03 % less than the better of these two (and one fleet 0.03 % more), for a
#: third of the shaping and packing time (docs/packing.md).
KEEPS: tuple[float, ...] = (1.0, 0.0)

_CONFIG = ("hardware", "batch", "concurrency", "duration_s")


@dataclass
class FleetResult:
    """Plans of the apps that could be planned, their packed fleet, timings (ms, wall) and, per app that
    could not be planned, a one-line reason. ``reused`` lists the apps whose previous plan still held;
    ``keep`` is the slack fraction the plans were shaped with."""

    plans: dict[str, Plan]
    fleet: FleetPlan
    solve_ms: float
    pack_ms: float
    failed: dict[str, str] = field(default_factory=dict)
    reused: list[str] = field(default_factory=list)
    keep: float = 1.0
    seeded: list[str] = field(default_factory=list)
    carried: list[str] = field(default_factory=list)  # apps on a carried plan, to solve again
    resolved: list[str] = field(default_factory=list)  # apps whose carried plan was replaced this epoch
    quick: list[str] = field(default_factory=list)  # given the solver's first realisable plan (carried)


def problem_digest(problem: ProblemSpec, policy: str, tighten: float = 0.0) -> str:
    """Stable digest of a problem and how it is planned (equal digests: the old plan still holds)."""
    blob = f"{problem.model_dump_json(exclude={'name'})}|{policy}|{tighten!r}"
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def seed_plan(problem: ProblemSpec, plan: Plan, policy: str) -> Plan:
    """``plan``, solved for ``problem`` by the solver an epoch uses, marked for :func:`plan_fleet`'s
    ``seeds``: a copy that records the problem's digest. An app's registration solves it as its first
    epoch will (control/registry.py); the epoch then takes that plan instead of solving again,
    as long as the problem it plans is still the same (same rates, catalog, hardware, policy)."""
    out = plan.model_copy()
    out.model_extra[DIGEST_KEY] = problem_digest(problem, policy)  # type: ignore[index]
    out.model_extra[RATES_KEY] = {m: spec.rate for m, spec in problem.modules.items()}  # type: ignore[index]
    return out


# --------------------------------------------------------------------------- shaping


@dataclass
class _Mod:
    """A module run on one configuration, as the solver planned it."""

    group: MachineGroup
    floor: float  # smallest planned rate: the module's rate (req/s)
    load: float  # W: planned rate, dummy included
    extra: float  # the plan's worst case above the dispatch bound (e.g. a burst term), s
    throughput: float
    price: float

    @property
    def collect(self) -> float:
        return self.group.batch / self.load

    def latency(self, split: bool) -> float:
        return self.group.duration_s + (2 if split else 1) * self.collect + self.extra


def _one_config(mp: ModulePlan) -> MachineGroup | None:
    gs = mp.groups
    if not gs or gs[0].duration_s <= 0:
        return None
    first = tuple(getattr(gs[0], k) for k in _CONFIG)
    return gs[0] if all(tuple(getattr(g, k) for k in _CONFIG) == first for g in gs) else None


def _solved(plan: Plan) -> dict[str, ModulePlan]:
    """The solver's module plans: the shaped plan's record of them, or the plan's own."""
    rec = (plan.model_extra or {}).get(SOLVED_KEY)
    if isinstance(rec, dict):
        return {m: ModulePlan.model_validate(v) for m, v in rec.items()}
    return dict(plan.modules)


def _modules(problem: ProblemSpec, solved: Mapping[str, ModulePlan]) -> dict[str, _Mod]:
    out: dict[str, _Mod] = {}
    for m, mp in solved.items():
        g = _one_config(mp)
        if g is None:
            continue
        load = sum(x.machines * x.rate_per_machine for x in mp.groups)
        if load <= 0:
            continue
        t = g.concurrency * g.batch / g.duration_s
        split = SPLIT_KEY in (mp.model_extra or {})
        bound = g.duration_s + (2 if split else 1) * g.batch / load
        floor = max(problem.modules[m].rate, float((mp.model_extra or {}).get("rate", 0.0)))
        info = (mp.model_extra or {}).get("dispatch")
        need = info.get("required_rate") if isinstance(info, dict) else None
        if isinstance(need, int | float) and isinstance(info, dict) and info.get("guaranteed", True):
            floor = max(floor, float(need) * (1 + 1e-6))  # a child's spread needs this rate
        price = problem.hardware[g.hardware].price_per_hour
        out[m] = _Mod(g, floor, load, max(0.0, mp.worst_case_latency_s - bound), t, price)
    return out


def _unfill(problem: ProblemSpec, mods: dict[str, _Mod], wcl: dict[str, float], keep: float) -> None:
    """Spend ``1 - keep`` of every path's slack on longer collection times (less dummy load), evenly among
    the path's single-configuration modules (in place)."""
    if keep >= 1:
        return
    extra = dict.fromkeys(mods, math.inf)
    for path in topology(problem).paths:
        slack = problem.slo_s - sum(wcl[m] for m in path)
        users = [m for m in path if m in mods]
        for m in users:
            extra[m] = min(extra[m], max(0.0, slack) * (1 - keep) / len(users))
    for m, e in extra.items():
        mod = mods[m]
        if 0 < e < math.inf:
            mod.load = max(mod.floor, mod.group.batch / (mod.collect + e))
            wcl[m] = mod.latency(split=False)


def _split_of(mod: _Mod) -> tuple[int, int] | None:
    """(full machines k, q) of a residual split, or None when the load has no residual below half."""
    units = mod.load / mod.throughput
    k = math.floor(units + 1e-9)
    rho = units - k
    if k < 1 or rho <= 1e-9:
        return None
    q = math.floor(1 / rho + 1e-9)
    return (k, q) if q >= 2 else None


def _splits(problem: ProblemSpec, mods: dict[str, _Mod], wcl: dict[str, float]) -> dict[str, tuple[int, int]]:
    """Split the modules whose paths have the slack for it, the most valuable first (in place)."""
    cands = [(m, s) for m, mod in mods.items() if (s := _split_of(mod)) is not None]
    cands.sort(key=lambda c: (-mods[c[0]].price * (1 - 1 / c[1][1]), c[0]))
    slack = {tuple(p): problem.slo_s - sum(wcl[m] for m in p) for p in topology(problem).paths}
    out: dict[str, tuple[int, int]] = {}
    for m, (k, q) in cands:
        mod = mods[m]
        t = mod.throughput
        old = (mod.load, wcl[m])
        mod.load = k * t + t / q
        new = mod.latency(split=True)
        paths = [p for p in slack if m in p]
        if all(slack[p] - (new - wcl[m]) >= 1e-9 for p in paths):
            for p in paths:
                slack[p] -= new - wcl[m]
            wcl[m] = new
            out[m] = (k, q)
        else:
            mod.load, wcl[m] = old
    return out


def _groups(mod: _Mod, split: tuple[int, int] | None) -> list[MachineGroup]:
    g, t = mod.group, mod.throughput
    if split is not None:
        k, q = split
        return [
            g.model_copy(update={"machines": k, "rate_per_machine": t}),
            g.model_copy(update={"machines": 1, "rate_per_machine": t / q}),
        ]
    n = max(1, math.ceil(mod.load / t - 1e-9))
    return [g.model_copy(update={"machines": n, "rate_per_machine": mod.load / n})]


def shape_plan(
    problem: ProblemSpec,
    plan: Plan,
    *,
    keep: float = 0.5,
    split: bool = True,
    cache: RealisationCache | None = None,
    schedules: Schedules | None = None,
) -> Plan:
    """A TC plan made packable: ``1 - keep`` of every path's slack spent on less dummy load (partial
    machines), then big modules split into full machines plus one periodic residual where the remaining
    slack pays for the split's longer worst case. Modules with several configurations are kept as planned.
    The solver's plan is recorded in the result so it can be reshaped (or restored) without solving.
    A dispatch-realised plan (:func:`planner.robust.solve_dispatchable`) gets its dispatch figures
    recomputed for the new rates (:func:`redispatch`); if the realised shaped plan no longer meets the
    SLO (or a child's spread falls short), the plan comes back as solved. ``cache`` and ``schedules`` go
    to :func:`redispatch` (they change nothing but the time taken)."""
    if not 0 <= keep <= 1:
        raise ValueError(f"keep must be a fraction in [0, 1], got {keep}")
    solved = _solved(plan)
    mods = _modules(problem, solved)
    wcl = {m: mp.worst_case_latency_s for m, mp in solved.items()}
    _unfill(problem, mods, wcl, keep)
    splits = _splits(problem, mods, wcl) if split else {}
    modules: dict[str, ModulePlan] = {}
    for m, mp in solved.items():
        mod = mods.get(m)
        if mod is None:
            modules[m] = mp
            continue
        groups = _groups(mod, splits.get(m))
        load = sum(g.machines * g.rate_per_machine for g in groups)
        extra = {k: v for k, v in (mp.model_extra or {}).items() if k != SPLIT_KEY}
        if m in splits:
            extra[SPLIT_KEY] = mod.collect
        modules[m] = ModulePlan(
            latency_budget_s=max(wcl[m], mp.latency_budget_s),
            worst_case_latency_s=wcl[m],
            dummy_rate=max(0.0, load - problem.modules[m].rate),
            groups=groups,
            **extra,
        )
    shaped = _assemble(problem, plan, modules, solved, keep)
    if not realised(plan):
        return shaped
    out = redispatch(problem, shaped, cache=cache, schedules=schedules)
    return out if out is not None else _assemble(problem, plan, dict(solved), solved, keep)


def realised(plan: Plan) -> bool:
    """The plan carries dispatch-realised figures (:func:`planner.robust.annotate`)."""
    if (plan.model_extra or {}).get("dispatch_realised"):
        return True
    return any(isinstance((mp.model_extra or {}).get("dispatch"), dict) for mp in plan.modules.values())


def redispatch(
    problem: ProblemSpec,
    plan: Plan,
    *,
    cache: RealisationCache | None = None,
    schedules: Schedules | None = None,
) -> Plan | None:
    """``plan`` with its dispatch figures (``dispatch``, worst cases, paths) recomputed by
    :func:`planner.robust.realise` for its current groups, e.g. after shaping or after packing raised
    rates; each module's planned figure is its Theorem-1 bound. None when the realised plan misses the
    SLO on a path or a child's spread rate no longer covers its requirement. Fan-out comes from the
    problem (``max_children_per_request``, else the rate ratio), as in ``solve_dispatchable`` without
    an explicit ``fan_out``. ``cache`` keeps the result for the same problem and module plans (a later
    call, or a later epoch, gets it without realising again); ``schedules`` is passed to ``realise`` (its
    keys hold everything a schedule depends on, prices included). Either gives the same result as none."""
    key = cache.key(problem, plan) if cache is not None else None
    if cache is not None and key is not None:
        hit = cache.get(key)
        if hit is not None:
            return plan.model_copy(update=hit) if hit else None
    out = _redispatch(problem, plan, schedules)
    if cache is not None and key is not None:
        cache.put(key, {} if out is None else {k: getattr(out, k) for k in _REALISED_FIELDS})
    return out


#: What :func:`planner.robust.annotate` sets on a plan: a cached realisation is these, applied to the plan.
_REALISED_FIELDS = ("modules", "paths", "slo_s", "dispatch_realised", "guaranteed")


def _redispatch(problem: ProblemSpec, plan: Plan, schedules: Schedules | None) -> Plan | None:
    return _realised_or_not(problem, plan, schedules)[0]


def _realised_or_not(
    problem: ProblemSpec, plan: Plan, schedules: Schedules | None
) -> tuple[Plan | None, Mapping[str, Realisation]]:
    """``plan`` realised (:func:`redispatch` without its cache; None when it misses the SLO on a path or
    a child's spread falls short) and the realisation it was judged by."""
    from planner.dispatch import theorem1_latencies
    from planner.robust import annotate, realise

    prices = {h: x.price_per_hour for h, x in problem.hardware.items()}
    modules: dict[str, ModulePlan] = {}
    kept: dict[str, ModulePlan] = {}
    for m, given in plan.modules.items():
        mp = given
        if SPLIT_KEY in (given.model_extra or {}):
            # the realised figure replaces d + 2 b / W, so the residual's saving is no longer known
            data = given.model_dump()
            data.pop(SPLIT_KEY)
            mp = ModulePlan.model_validate(data)
        kept[m] = mp
        t1 = max(theorem1_latencies(mp, prices), default=0.0)
        modules[m] = mp.model_copy(update={"worst_case_latency_s": t1, "dispatch": {"theorem1_s": t1}})
    real = realise(problem, plan.model_copy(update={"modules": modules}), cache=schedules)
    for path in topology(problem).paths:
        if sum(real[m].worst_case_s for m in path) > problem.slo_s + 1e-9:
            return None, real
    if any(r.guaranteed and not r.collision_free for r in real.values()):
        return None, real
    return annotate(problem, plan.model_copy(update={"modules": kept}), real), real


class RealisationCache:
    """Dispatch-realised figures of plans (:func:`redispatch`), keyed by the problem and the module
    plans (their full content: what ``realise`` and ``annotate`` read). What one epoch used (:meth:`rotate`
    ends an epoch) is kept through the next and dropped at its end unless used again, so an epoch whose
    plans are all reused realises nothing again (the shapes of the ``keep`` s it did not choose included);
    the memory held is a few module plans per app and ``keep`` of the last two epochs."""

    def __init__(self) -> None:
        self._now: dict[str, dict[str, Any]] = {}
        self._last: dict[str, dict[str, Any]] = {}
        self._problems: dict[int, tuple[ProblemSpec, str]] = {}

    def key(self, problem: ProblemSpec, plan: Plan) -> str:
        held = self._problems.get(id(problem))
        if held is None or held[0] is not problem:  # the digest of a problem object is computed once
            held = (problem, hashlib.sha256(problem.model_dump_json().encode()).hexdigest())
            self._problems[id(problem)] = held
        blob = "|".join(f"{m}:{mp.model_dump_json()}" for m, mp in plan.modules.items())
        return held[1] + hashlib.sha256(blob.encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        hit = self._now.get(key)
        if hit is None:
            hit = self._last.pop(key, None)
            if hit is not None:
                self._now[key] = hit
        return hit

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._now[key] = value

    def rotate(self) -> None:
        """End an epoch: what was not used since the previous rotation is dropped."""
        self._last, self._now = self._now, {}
        self._problems.clear()

    def __len__(self) -> int:
        return len(self._now) + len(self._last)


#: The cache :func:`plan_fleet` uses by default (one per process: the control loop's epochs share it).
REALISATIONS = RealisationCache()


def restore_modules(problem: ProblemSpec, plan: Plan, modules: set[str]) -> Plan:
    """``plan`` with ``modules`` back as the solver planned them."""
    solved = _solved(plan)
    mods = {m: (solved[m] if m in modules else mp) for m, mp in plan.modules.items()}
    keep = float((plan.model_extra or {}).get(KEEP_KEY, 1.0))
    return _assemble(problem, plan, mods, solved, keep)


def _assemble(
    problem: ProblemSpec,
    plan: Plan,
    modules: dict[str, ModulePlan],
    solved: Mapping[str, ModulePlan],
    keep: float,
) -> Plan:
    prices = {h: s.price_per_hour for h, s in problem.hardware.items()}
    occ = billed = 0.0
    for m, mp in modules.items():
        o, b = _costs(mp, prices)
        if mp is not solved.get(m):
            modules[m] = mp.model_copy(update={"occupancy_per_hour": o, "billed_per_hour": b})
        occ += o
        billed += b
    extra: dict[str, Any] = dict(plan.model_extra or {})
    extra[SOLVED_KEY] = {m: mp.model_dump() for m, mp in solved.items()}
    extra[KEEP_KEY] = keep
    extra["paths"] = [
        {"modules": list(p), "worst_case_latency_s": sum(modules[m].worst_case_latency_s for m in p)}
        for p in topology(problem).paths
    ]
    return Plan(
        objective=plan.objective,
        cost_per_hour=occ,
        billed_per_hour=billed,
        solve_ms=plan.solve_ms,
        modules=modules,
        **extra,
    )


# --------------------------------------------------------------------------- epoch


@dataclass(frozen=True)
class _Planning:
    policy: str
    tighten: float
    hold: float
    stick: float
    solver: Callable[[ProblemSpec], Plan] | None
    shares: bool = False  # the solver takes a ``schedules`` keyword (:class:`ScheduleSharingSolver`)
    budget: float | None = None  # CPU s of the solve phase before carried plans stay (None: no carrying)
    quick: bool = False  # the solver takes a ``first_found`` keyword (a quick mode)

    def plan(self, problem: ProblemSpec, schedules: Schedules | None, *, first_found: bool = False) -> Plan:
        if self.solver is None:
            return solve(problem, policy=self.policy, objective="billed")
        kwargs: dict[str, Any] = {"first_found": True} if first_found and self.quick else {}
        if self.shares and schedules is not None:
            kwargs["schedules"] = schedules
        return self.solver(problem, **kwargs)


class ScheduleSharingSolver(Protocol):
    """A solver that keeps the module schedules it builds in ``schedules`` (a dict keyed as
    :func:`planner.robust.realise`'s cache), e.g. :func:`planner.robust.solve_dispatchable`.
    :func:`plan_fleet` gives such a solver one dict per app and realises the app's shapes with the same
    dict, so a module the shaping or packing leaves as solved is not scheduled again."""

    def __call__(self, problem: ProblemSpec, /, *, schedules: Schedules | None = None) -> Plan: ...


def _takes_keyword(solver: Callable[..., Plan] | None, name: str) -> bool:
    """Whether ``solver`` takes keyword ``name`` (``schedules``: a :class:`ScheduleSharingSolver`;
    ``first_found``: a quick mode, as :func:`planner.robust.solve_dispatchable` has)."""
    if solver is None:
        return False
    try:
        param = inspect.signature(solver).parameters.get(name)
    except (TypeError, ValueError):  # no signature to read (some builtins): call it plainly
        return False
    return param is not None and param.kind in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True)
class _Memo:
    """What one :func:`plan_fleet` call reuses: the realisation cache and, per app, the module schedules
    its solve and its realisations build (none when ``cache`` is None: everything is computed afresh)."""

    cache: RealisationCache | None
    schedules: dict[str, Schedules] = field(default_factory=dict)

    def of(self, app: str) -> Schedules | None:
        return None if self.cache is None else self.schedules.setdefault(app, {})


@dataclass
class _Solved:
    """What :func:`_solve_all` gives the epoch."""

    plans: dict[str, Plan] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    reused: list[str] = field(default_factory=list)
    seeded: list[str] = field(default_factory=list)
    carried: list[str] = field(default_factory=list)  # on a carried plan at the end of the solve phase
    resolved: list[str] = field(default_factory=list)  # carried before, solved again now
    quick: list[str] = field(default_factory=list)  # given the solver's first realisable plan (carried)

    @property
    def unchanged(self) -> set[str]:
        """Apps whose plan was not solved this epoch (their shapes can be reused)."""
        return set(self.reused) | set(self.carried)


def _solve_all(
    problems: Mapping[str, ProblemSpec],
    previous_plans: Mapping[str, Plan],
    seeds: Mapping[str, Plan],
    how: _Planning,
    memo: _Memo,
) -> _Solved:
    started = time.thread_time()  # this thread: the local stack plans beside its workers
    out = _Solved()
    pending: list[str] = []  # apps on a carried plan: solved again while the budget lasts
    unplanned: list[str] = []  # apps with no plan that serves them: solved now
    for app in sorted(problems):
        problem = problems[app]
        schedules = memo.of(app)
        digest = problem_digest(problem, how.policy, how.tighten)
        old = previous_plans.get(app)
        extra = (old.model_extra or {}) if old is not None else {}
        if old is not None and extra.get(DIGEST_KEY) == digest:
            out.plans[app] = old
            (pending if how.budget is not None and CARRIED_KEY in extra else out.reused).append(app)
            continue
        shape = problem_digest(_rateless(problem), how.policy, how.tighten)
        held = (
            _at_rates(problem, old, digest, memo.cache, schedules)
            if old is not None and extra.get(SHAPE_KEY) == shape and _holds(problem, old, how.hold)
            else None
        )
        if held is not None:
            out.plans[app] = held
            (pending if how.budget is not None and CARRIED_KEY in extra else out.reused).append(app)
            continue
        seed = seeds.get(app)
        if seed is not None and how.tighten <= 0 and (seed.model_extra or {}).get(DIGEST_KEY) == digest:
            out.seeded.append(app)
            out.plans[app] = _taken(
                problem, old, seed.model_copy(), how, memo.cache, schedules
            )  # the solver's
            continue
        carried = _carry(problem, old, digest, shape, how, memo.cache, schedules) or _carry(
            problem, seed, digest, shape, how, memo.cache, schedules
        )
        if carried is not None:
            out.plans[app] = carried
            pending.append(app)
            continue
        unplanned.append(app)
    _solve_unplanned(problems, previous_plans, unplanned, how, memo, started, out, pending)
    _resolve(problems, pending, how, memo, started, out)
    return out


def _solve_unplanned(
    problems: Mapping[str, ProblemSpec],
    previous_plans: Mapping[str, Plan],
    apps: Sequence[str],
    how: _Planning,
    memo: _Memo,
    started: float,
    out: _Solved,
    pending: list[str],
) -> None:
    """Solve ``apps`` (none has a plan that serves it). With a budget and a solver that has a quick
    mode (``first_found``), once the solve phase's CPU so far plus the rest at the mean CPU of this
    epoch's full solves would pass the budget, an app that is new to its problem's shape (no previous
    plan to stick to) gets the solver's first realisable plan, marked carried (``quick``): it is solved
    in full in a later epoch, dearest first, as carried plans are (:func:`_resolve`)."""
    from planner.robust import FIRST_FOUND_KEY

    full_cpu: list[float] = []
    for i, app in enumerate(apps):
        problem = problems[app]
        old = previous_plans.get(app)
        shape = problem_digest(_rateless(problem), how.policy, how.tighten)
        sticks = old is not None and (old.model_extra or {}).get(SHAPE_KEY) == shape and how.stick > 0
        quick = False
        if how.budget is not None and how.quick and not sticks and full_cpu:
            mean = sum(full_cpu) / len(full_cpu)
            quick = time.thread_time() - started + mean * (len(apps) - i) > how.budget
        began = time.thread_time()
        try:
            plan = _solved_plan(problem, how, memo.of(app), first_found=quick)
        except PlannerError as exc:
            out.failed[app] = (str(exc).splitlines() or [type(exc).__name__])[0]
            continue
        if not quick:
            full_cpu.append(time.thread_time() - began)
        if (plan.model_extra or {}).get(FIRST_FOUND_KEY):
            digest = problem_digest(problem, how.policy, how.tighten)
            plan = _stamped(problem, plan, digest, shape, memo.of(app))
            mark = {"digest": digest, "sticky": False, "quick": True}
            out.plans[app] = plan.model_copy(update={CARRIED_KEY: mark})
            out.quick.append(app)
            pending.append(app)
            continue
        out.plans[app] = _taken(problem, old, plan, how, memo.cache, memo.of(app))


def _taken(
    problem: ProblemSpec,
    old: Plan | None,
    plan: Plan,
    how: _Planning,
    cache: RealisationCache | None,
    schedules: Schedules | None,
) -> Plan:
    """The solver's ``plan`` for ``problem`` as the epoch takes it: the previous plan ``old`` grown
    instead when only the rates changed and it bills at most ``how.stick`` more (:func:`_sticky`),
    stamped with the problem it serves."""
    digest = problem_digest(problem, how.policy, how.tighten)
    shape = problem_digest(_rateless(problem), how.policy, how.tighten)
    if old is not None and (old.model_extra or {}).get(SHAPE_KEY) == shape and how.stick > 0:
        plan = _sticky(problem, old, plan, how, cache, schedules)
    return _stamped(problem, plan, digest, shape, schedules)


def _solved_plan(
    problem: ProblemSpec, how: _Planning, schedules: Schedules | None, *, first_found: bool = False
) -> Plan:
    """The solver's plan for ``problem`` (for an SLO ``how.tighten`` shorter; its quick mode when
    ``first_found``)."""
    target = (
        problem
        if how.tighten <= 0
        else problem.model_copy(update={"slo_s": problem.slo_s * (1 - how.tighten)})
    )
    return how.plan(target, schedules, first_found=first_found)


def _stamped(problem: ProblemSpec, plan: Plan, digest: str, shape: str, schedules: Schedules | None) -> Plan:
    """``plan`` marked with the problem it serves (its digest, its digest without rates, its rates)."""
    if schedules:
        _keep_planned(schedules, problem, plan)
    plan.model_extra[DIGEST_KEY] = digest  # type: ignore[index]
    plan.model_extra[SHAPE_KEY] = shape  # type: ignore[index]
    plan.model_extra[RATES_KEY] = {m: spec.rate for m, spec in problem.modules.items()}  # type: ignore[index]
    plan.model_extra.pop(CARRIED_KEY, None)  # type: ignore[union-attr]
    return plan


def _resolve(
    problems: Mapping[str, ProblemSpec],
    pending: Sequence[str],
    how: _Planning,
    memo: _Memo,
    started: float,
    out: _Solved,
) -> None:
    """Solve the apps on a carried plan again, dearest first, while the solve phase has spent less than
    ``how.budget`` CPU seconds (since ``started``); the others keep their carried plan (``out.carried``).
    An app whose solve fails keeps it too. The fresh plan is taken as an epoch without a budget takes
    it (through :func:`_sticky` when only the rates changed): once none is carried every app has the
    solver plan such an epoch gives it."""
    assert how.budget is not None or not pending
    order = sorted(pending, key=lambda a: (-out.plans[a].billed_per_hour, a))
    for app in order:
        if time.thread_time() - started >= cast("float", how.budget):
            out.carried.append(app)
            continue
        problem = problems[app]
        schedules = memo.of(app)
        try:
            plan = _solved_plan(problem, how, schedules)
        except PlannerError:
            out.carried.append(app)
            continue
        carried = out.plans[app]
        mark = (carried.model_extra or {}).get(CARRIED_KEY)
        if isinstance(mark, dict) and mark.get("sticky") and how.stick > 0:  # carried over higher rates
            plan = _sticky(problem, carried, plan, how, memo.cache, schedules)
        digest = problem_digest(problem, how.policy, how.tighten)
        shape = problem_digest(_rateless(problem), how.policy, how.tighten)
        out.plans[app] = _stamped(problem, plan, digest, shape, schedules)
        out.resolved.append(app)
    out.carried.sort()
    out.resolved.sort()


def _carry(
    problem: ProblemSpec,
    old: Plan | None,
    digest: str,
    shape: str,
    how: _Planning,
    cache: RealisationCache | None,
    schedules: Schedules | None,
) -> Plan | None:
    """``old`` (an app's plan for an earlier problem: other prices, another catalog or SLO, other
    rates, other service times) still serving ``problem``, when ``how.budget`` is set: the same
    modules; every machine's configuration priced and in the new profile, the modules' groups still in
    throughput-cost order at the new prices (:func:`_retimed`); the SLO met (realised again at the new
    problem when the plan is dispatch-realised, else :func:`check_plan`). A changed service time is
    taken from the profile (a machine carries at most the new throughput); only a dispatch-realised plan
    is carried over one (its figures are realised again; a plain plan's come from the solver's latency
    split). A rate above the plan's capacity is met by whole machines of the module's first group
    (:func:`_grown_realised`, as an epoch without a budget may keep it); a rate that fell, even past
    ``how.hold``, is served by the same machines with more dummy load (solved again soon, through
    :func:`_sticky` as an epoch without a budget solves it). The costs are those of the new prices. None
    otherwise: the app is solved now."""
    if how.budget is None or old is None or how.tighten > 0 or not _tc(old):
        return None
    prices = {h: x.price_per_hour for h, x in problem.hardware.items()}
    solved = _solved(old)
    if set(old.modules) != set(problem.modules) or set(solved) != set(problem.modules):
        return None
    served = {m: _retimed(problem, m, mp, prices) for m, mp in old.modules.items()}
    base = {m: _retimed(problem, m, mp, prices) for m, mp in solved.items()}
    if any(mp is None for mp in (*served.values(), *base.values())):
        return None
    modules = cast("dict[str, ModulePlan]", served)
    retimed = any(modules[m] is not old.modules[m] for m in modules)
    if retimed and not realised(old):
        return None
    extra: dict[str, Any] = dict(old.model_extra or {})
    mark = extra.get(CARRIED_KEY) or {
        "digest": extra.get(DIGEST_KEY),
        "sticky": extra.get(SHAPE_KEY) == shape,  # only the rates changed
    }
    if isinstance(extra.get(SOLVED_KEY), dict):
        extra[SOLVED_KEY] = {m: _priced(mp, prices).model_dump() for m, mp in base.items() if mp is not None}
    modules = {m: _priced(mp, prices) for m, mp in modules.items()}
    priced = old.model_copy(
        update={
            "modules": modules,
            "cost_per_hour": sum(_costs(mp, prices)[0] for mp in modules.values()),
            "billed_per_hour": sum(_costs(mp, prices)[1] for mp in modules.values()),
            **extra,
        }
    )
    # the served (shaped) plan as it is, unless its service times changed (then the solver's, grown);
    # rates that fell past the hold band too: the plan serves them (it is solved again soon)
    serves = not retimed and _serves(problem, priced, math.inf)
    held = _at_rates(problem, priced, digest, cache, schedules) if serves else None
    if held is None:  # the rates outgrew it, or its shape no longer realises: the solver's plan, grown
        held = _grown_realised(problem, priced, math.inf, cache, schedules)
    if held is None or (not realised(held) and check_plan(problem, held)):
        return None
    return held.model_copy(update={CARRIED_KEY: mark, SHAPE_KEY: shape, DIGEST_KEY: digest})


def _serves(problem: ProblemSpec, plan: Plan, hold: float) -> bool:
    """Every module's rate within ``plan``'s planned rate and, where the plan records the rates it was
    solved for, none more than ``hold`` below it."""
    solved_rates = (plan.model_extra or {}).get(RATES_KEY)
    for m, spec in problem.modules.items():
        capacity = sum(g.machines * g.rate_per_machine for g in plan.modules[m].groups)
        if spec.rate > capacity * (1 + 1e-9):
            return False
        if isinstance(solved_rates, dict) and m in solved_rates:
            if spec.rate < float(solved_rates[m]) / (1 + hold):
                return False
    return True


def _retimed(
    problem: ProblemSpec, module: str, mp: ModulePlan, prices: Mapping[str, float]
) -> ModulePlan | None:
    """``mp`` on ``problem``'s profile of ``module``: every group's configuration priced and in the
    profile, with the profile's duration (a machine then carries at most the profile's throughput),
    the groups still in throughput-cost order at ``prices``; ``mp`` itself when nothing changes, None
    when a configuration is gone or the order changed."""
    profile = {(e.hardware, e.batch, e.concurrency): e for e in problem.modules[module].profile}
    groups: list[MachineGroup] = []
    ratios: list[float] = []
    for g in mp.groups:
        e = profile.get((g.hardware, g.batch, g.concurrency))
        if e is None or g.hardware not in prices or prices[g.hardware] <= 0:
            return None
        same = abs(e.duration_s - g.duration_s) <= 1e-12 * max(1.0, g.duration_s)
        if same and g.rate_per_machine <= e.throughput * (1 + 1e-9):
            groups.append(g)
        else:
            rate = min(g.rate_per_machine, e.throughput)
            groups.append(g.model_copy(update={"duration_s": e.duration_s, "rate_per_machine": rate}))
        ratios.append(e.throughput / prices[g.hardware])
    if not all(a >= b * (1 - 1e-12) for a, b in itertools.pairwise(ratios)):
        return None
    if all(a is b for a, b in zip(groups, mp.groups, strict=True)):
        return mp
    return mp.model_copy(update={"groups": groups})


def _costs(mp: ModulePlan, prices: Mapping[str, float]) -> tuple[float, float]:
    """``mp``'s occupancy and billed cost ($/h) at ``prices``."""
    occ = billed = 0.0
    for g in mp.groups:
        t = g.concurrency * g.batch / g.duration_s if g.duration_s > 0 else math.inf
        occ += g.machines * prices[g.hardware] * g.rate_per_machine / t
        billed += g.machines * prices[g.hardware]
    return occ, billed


def _priced(mp: ModulePlan, prices: Mapping[str, float]) -> ModulePlan:
    """``mp`` with its occupancy and billed cost at ``prices``."""
    occ, billed = _costs(mp, prices)
    return mp.model_copy(update={"occupancy_per_hour": occ, "billed_per_hour": billed})


def _sticky(
    problem: ProblemSpec,
    old: Plan,
    fresh: Plan,
    how: _Planning,
    cache: RealisationCache | None,
    schedules: Schedules | None,
) -> Plan:
    """The plan an app whose rates moved past its previous plan gets, preferring the least movement
    within ``how.stick`` (a fraction) of the fresh plan's bill: the previous plan grown by whole machines
    of its first groups (nothing moves); else the app solved again with each module restricted to the
    configurations it used (machines added or removed, none changes hardware or batch; a fresh plan that
    already uses no other configuration is taken as it is); else the fresh plan. Without the second, a
    small rate change can move a module to other hardware (the billed optimum jumps with whole machines)
    and the next one back, so the fleet's instance counts flap under steady load."""
    limit = fresh.billed_per_hour * (1 + how.stick) + 1e-9
    grown = _grown_realised(problem, old, how.hold, cache, schedules)
    if grown is not None and grown.billed_per_hour <= limit:
        return grown
    before = _configs(_solved(old))
    if _configs(fresh.modules) == before or set(before) != set(problem.modules):
        return fresh
    modules = {
        m: spec.model_copy(
            update={"profile": [e for e in spec.profile if (e.hardware, e.batch, e.concurrency) in before[m]]}
        )
        for m, spec in problem.modules.items()
    }
    if not all(spec.profile for spec in modules.values()):
        return fresh
    try:
        kept = how.plan(problem.model_copy(update={"modules": modules}), schedules)
    except PlannerError:
        return fresh
    if kept.billed_per_hour > limit:
        return fresh
    kept.model_extra["kept_configurations"] = True  # type: ignore[index]
    return kept


def _configs(modules: Mapping[str, ModulePlan]) -> dict[str, set[tuple[str, int, int]]]:
    """Per module, the configurations (hardware, batch, concurrency) its machine groups use."""
    return {
        m: {(g.hardware, g.batch, g.concurrency) for g in mp.groups if g.machines > 0}
        for m, mp in modules.items()
    }


def _keep_planned(schedules: Schedules, problem: ProblemSpec, plan: Plan) -> None:
    """Keep only the schedules of ``plan``'s modules (in place): the app's shapes and realisations reuse
    those (a module they leave as solved); the solver's other rounds' would only be held through the
    epoch, which costs memory and garbage-collector time."""
    from planner.robust import schedule_key

    prices = {h: x.price_per_hour for h, x in problem.hardware.items()}
    used = {schedule_key(m, mp, prices) for m, mp in plan.modules.items()}
    for key in [k for k in schedules if k not in used]:
        del schedules[key]


def _grown(problem: ProblemSpec, plan: Plan, hold: float) -> Plan | None:
    """The solver's plan behind ``plan`` with more machines in each module's first group (the highest
    throughput-cost ratio) until its planned rate covers the new rate; None when a rate fell more than
    ``hold`` below the one it was solved for. Under TC more load only shortens every worst case (Theorem 1:
    w grows), so the plan's figures stay valid bounds."""
    solved_rates = (plan.model_extra or {}).get(RATES_KEY)
    if not isinstance(solved_rates, dict) or set(solved_rates) != set(problem.modules) or not _tc(plan):
        return None
    prices = {h: x.price_per_hour for h, x in problem.hardware.items()}
    modules: dict[str, ModulePlan] = {}
    occ = billed = 0.0
    for m, mp in _solved(plan).items():
        rate = problem.modules[m].rate
        if rate < float(solved_rates[m]) / (1 + hold) or not mp.groups or mp.groups[0].rate_per_machine <= 0:
            return None
        groups = list(mp.groups)
        capacity = sum(g.machines * g.rate_per_machine for g in groups)
        if rate > capacity * (1 + 1e-9):
            g0 = groups[0]
            more = math.ceil((rate - capacity) / g0.rate_per_machine - 1e-9)
            groups[0] = g0.model_copy(update={"machines": g0.machines + more})
            capacity = sum(g.machines * g.rate_per_machine for g in groups)  # as a grown plan sums it
        o, b = _costs(mp.model_copy(update={"groups": groups}), prices)
        update: dict[str, Any] = {"groups": groups, "dummy_rate": max(0.0, capacity - rate)}
        update.update(occupancy_per_hour=o, billed_per_hour=b)
        if "rate" in (mp.model_extra or {}):
            update["rate"] = rate
        modules[m] = mp.model_copy(update=update)
        occ += o
        billed += b
    extra = {k: v for k, v in (plan.model_extra or {}).items() if k not in (SOLVED_KEY, KEEP_KEY)}
    return Plan(
        objective=plan.objective,
        cost_per_hour=occ,
        billed_per_hour=billed,
        solve_ms=0.0,
        modules=modules,
        **{**extra, "grown": True},
    )


#: Rounds of :func:`_grown_realised`: each raises the modules the last one found short (:func:`_shortfall`).
GROW_ROUNDS = 6


def _grown_realised(
    problem: ProblemSpec,
    old: Plan,
    hold: float,
    cache: RealisationCache | None,
    schedules: Schedules | None,
) -> Plan | None:
    """:func:`_grown` of ``old``, realised again when ``old`` is dispatch-realised (more machines change
    the bursts and spread rates). While it does not realise, it is repaired and realised again, up to
    :data:`GROW_ROUNDS` times (:func:`_shortfall`): a child whose spread rate falls short of what its
    parents' bursts now need gets more machines of its first group, planned for that rate (as the
    dispatch-aware solve's repair plans it); else, on each path over the SLO (longer service times), the
    module waiting longest for its batch gets one machine more. None when it still does not realise (or
    cannot be grown)."""
    grown = _grown(problem, old, hold)
    if grown is None or not realised(old):
        return grown
    schedules = {} if schedules is None else schedules  # the rounds share their schedules
    out = redispatch(problem, grown, cache=cache, schedules=schedules)  # an earlier epoch's may be cached
    real: Mapping[str, Realisation] | None = None
    for _ in range(GROW_ROUNDS):
        if out is not None:
            return out
        if real is None:  # the first miss (perhaps from the cache): its figures
            real = _realised_or_not(problem, grown, schedules)[1]
        need = _shortfall(problem, grown, real)
        if not need:
            return None
        grown = _with_capacity(problem, grown, need)
        out, real = _realised_or_not(problem, grown, schedules)
    return out


def _shortfall(problem: ProblemSpec, plan: Plan, real: Mapping[str, Realisation]) -> dict[str, float]:
    """The planned rate (req/s) modules of ``plan`` need so that it realises, from its realisation
    ``real``. Each module whose spread falls short of its parents' bursts (not collision free): its rate
    scaled by required / capacity rate, and at least the required rate, 2 % over (its own schedule
    changes with its machines). If none, for each path over the SLO the module on it with the longest
    wait for its batch (realised worst case less its shortest duration) gets one machine more of its
    first group. Empty: more machines of these configurations would not help."""
    out: dict[str, float] = {}
    for m, r in real.items():
        if not r.guaranteed or r.collision_free or not math.isfinite(r.required_rate):
            continue
        planned = sum(g.machines * g.rate_per_machine for g in plan.modules[m].groups)
        out[m] = max(planned * r.required_rate / max(r.capacity_rate, 1e-12), r.required_rate) * 1.02
    if out:
        return out
    for path in topology(problem).paths:
        if sum(real[m].worst_case_s for m in path) <= problem.slo_s + 1e-9:
            continue

        def wait(m: str) -> float:
            return real[m].worst_case_s - min((g.duration_s for g in plan.modules[m].groups), default=0.0)

        m = max(path, key=wait)
        mp = plan.modules[m]
        if mp.groups and mp.groups[0].rate_per_machine > 0:
            planned = sum(g.machines * g.rate_per_machine for g in mp.groups)
            out[m] = max(out.get(m, 0.0), planned + mp.groups[0].rate_per_machine * (1 - 1e-9))
    return out


def _with_capacity(problem: ProblemSpec, plan: Plan, need: Mapping[str, float]) -> Plan:
    """``plan`` with more machines in the first group of each module of ``need`` until its planned
    rate reaches it (its solver's modules and costs to match)."""
    prices = {h: x.price_per_hour for h, x in problem.hardware.items()}
    modules = dict(plan.modules)
    for m, target in need.items():
        mp = modules[m]
        groups = list(mp.groups)
        capacity = sum(g.machines * g.rate_per_machine for g in groups)
        g0 = groups[0]
        if capacity >= target or g0.rate_per_machine <= 0:
            continue
        more = math.ceil((target - capacity) / g0.rate_per_machine - 1e-9)
        groups[0] = g0.model_copy(update={"machines": g0.machines + more})
        capacity = sum(g.machines * g.rate_per_machine for g in groups)
        occ, billed = _costs(mp.model_copy(update={"groups": groups}), prices)
        modules[m] = mp.model_copy(
            update={
                "groups": groups,
                "dummy_rate": max(0.0, capacity - problem.modules[m].rate),
                "occupancy_per_hour": occ,
                "billed_per_hour": billed,
            }
        )
    return plan.model_copy(
        update={
            "modules": modules,
            "cost_per_hour": sum(_costs(mp, prices)[0] for mp in modules.values()),
            "billed_per_hour": sum(_costs(mp, prices)[1] for mp in modules.values()),
        }
    )


def _rateless(problem: ProblemSpec) -> ProblemSpec:
    modules = {m: spec.model_copy(update={"rate": 1.0}) for m, spec in problem.modules.items()}
    return problem.model_copy(update={"modules": modules})


def _holds(problem: ProblemSpec, plan: Plan, hold: float) -> bool:
    """The plan still serves ``problem``: every module's planned rate (dummy included) covers the new rate,
    and no rate fell more than ``hold`` (a fraction) below the one the plan was solved for."""
    solved = (plan.model_extra or {}).get(RATES_KEY)
    if hold <= 0 or not isinstance(solved, dict) or set(solved) != set(problem.modules):
        return False
    for m, spec in problem.modules.items():
        mp = plan.modules.get(m)
        if mp is None:
            return False
        capacity = sum(g.machines * g.rate_per_machine for g in mp.groups)
        if spec.rate > capacity * (1 + 1e-9) or spec.rate < float(solved[m]) / (1 + hold):
            return False
    return True


def _at_rates(
    problem: ProblemSpec,
    plan: Plan,
    digest: str,
    cache: RealisationCache | None,
    schedules: Schedules | None,
) -> Plan | None:
    """``plan`` serving ``problem``'s rates: the same machines, the dummy load adjusted. A
    dispatch-realised plan is realised again at the new rates (its bursts and the spread rates its
    children need depend on them), and so are the solver's modules it records (a later shape starts from
    them); None when either no longer realises within the SLO (the app is then solved again)."""

    def adjust(m: str, mp: ModulePlan) -> ModulePlan:
        rate = problem.modules[m].rate
        capacity = sum(g.machines * g.rate_per_machine for g in mp.groups)
        update: dict[str, Any] = {"dummy_rate": max(0.0, capacity - rate)}
        if "rate" in (mp.model_extra or {}):
            update["rate"] = rate
        return mp.model_copy(update=update)

    extra: dict[str, Any] = dict(plan.model_extra or {})
    extra[DIGEST_KEY] = digest
    if isinstance(extra.get(SOLVED_KEY), dict):
        solved = {m: ModulePlan.model_validate(v) for m, v in extra[SOLVED_KEY].items()}
        extra[SOLVED_KEY] = {m: adjust(m, mp).model_dump() for m, mp in solved.items()}
    modules = {m: adjust(m, mp) for m, mp in plan.modules.items()}
    held = plan.model_copy(update={"modules": modules, **extra})
    if not realised(plan):
        return held
    schedules = {} if schedules is None else schedules  # the two realisations share their schedules
    again = redispatch(problem, held, cache=cache, schedules=schedules)
    if again is None or not isinstance(extra.get(SOLVED_KEY), dict):
        return again
    base = redispatch(
        problem, held.model_copy(update={"modules": _solved(held)}), cache=cache, schedules=schedules
    )
    if base is None:
        return None
    recorded = {m: mp.model_dump() for m, mp in base.modules.items()}
    return again.model_copy(update={SOLVED_KEY: recorded})


def _tc(plan: Plan) -> bool:
    return bool((plan.model_extra or {}).get("latency_model", "tc") == "tc")


_GC_LOCK = threading.Lock()
_gc_state: dict[str, Any] = {"depth": 0, "saved": None}


@contextlib.contextmanager
def _eased_collector() -> Iterator[None]:
    """Raise the garbage-collector thresholds to at least :data:`EPOCH_GC_THRESHOLDS` for the block and
    restore the previous ones after it (the outermost of concurrent or nested blocks restores)."""
    with _GC_LOCK:
        if _gc_state["depth"] == 0:
            saved = gc.get_threshold()
            _gc_state["saved"] = saved
            gc.set_threshold(*(max(a, b) for a, b in zip(saved, EPOCH_GC_THRESHOLDS, strict=True)))
        _gc_state["depth"] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_state["depth"] -= 1
            if _gc_state["depth"] == 0:
                gc.set_threshold(*_gc_state["saved"])


def plan_fleet(
    problems: Mapping[str, ProblemSpec],
    *,
    previous: FleetPlan | None = None,
    previous_plans: Mapping[str, Plan] | None = None,
    seeds: Mapping[str, Plan] | None = None,
    policy: str = "skinflint",
    keeps: Sequence[float] = KEEPS,
    tighten: float = 0.0,
    hold: float = 0.15,
    stick: float = 0.03,
    solver: Callable[[ProblemSpec], Plan] | None = None,
    align: bool = True,
    guard_s: float = ALIGN_GUARD_S,
    cache: RealisationCache | bool = True,
    solve_budget_s: float | None = None,
) -> FleetResult:
    """Plan every app (an app that cannot be planned goes to ``failed`` with a one-line reason; the others
    still plan), shape the plans for packing and pack. ``previous_plans[app]`` is reused when that app's
    problem is unchanged, or when only its rates changed, each still within the plan's planned rate (dummy
    included) and none more than ``hold`` (a fraction; 0 turns this off) below the rate it was solved for:
    the same machines then serve the new rates with more or less dummy load, so nothing moves. When only
    rates changed but the plan no longer covers them, the previous plan grown by whole machines of the
    same configurations is kept if it bills at most ``stick`` (a fraction) more than a fresh plan: fewer
    instances change hardware type. ``seeds[app]``: a plan the same ``solver`` and ``policy`` made for
    this app's problem before the epoch (:func:`seed_plan`, e.g. at the app's registration), taken
    instead of solving when the app is not reused and the recorded problem digest is this epoch's
    (``FleetResult.seeded``); a seed for another problem is ignored. The result is the same as solving,
    only faster. ``previous`` keeps unchanged shares on their slots. ``tighten`` plans
    every app for an SLO that much shorter (a fraction), leaving the difference as slack for co-location;
    ``solver`` replaces :func:`~planner.solve.solve` (e.g. a dispatch-aware planner); one that takes a
    ``schedules`` keyword (:class:`ScheduleSharingSolver`) gets one dict per app, which the app's shapes are
    then realised with (unless ``cache`` is False). ``align`` packs
    modules of one machine into aligned duty cycles (:func:`~planner.packing.pack`; the returned plans
    carry the raised rates and the schedule phases, :func:`~planner.packing.apply_phases`), with
    ``guard_s`` idle after every turn. ``cache``: where dispatch-realised shapes are kept between epochs
    (True: the process's :data:`REALISATIONS`; False: nowhere, every shape realised afresh); it changes
    only the time taken, never the result. While it runs the garbage collector's thresholds are raised
    to :data:`EPOCH_GC_THRESHOLDS` (restored on return).

    ``solve_budget_s`` bounds the epoch's solving when problems change under plans that still serve them
    (a new price list, a looser SLO, a new hardware type: every problem digest changes at once; a load
    ramp past many plans; longer service times). None (the default): every such app is solved now. A
    number of CPU seconds: an app whose previous plan (or registration seed) was made for another problem
    keeps that plan, *carried* (:data:`CARRIED_KEY`, ``FleetResult.carried``), when it still serves the
    new problem (the same configurations, in throughput-cost order at the new prices, no rate fallen
    more than ``hold``, the SLO met; its costs at the new prices; a dispatch-realised plan re-timed to
    changed service times; rates past its capacity served by the plan grown as above: :func:`_carry`);
    after the apps that must be solved, the carried ones are solved again,
    dearest first, until the solve phase has spent the budget (CPU time of the calling thread; one
    solve may overrun it), the others in later epochs (``FleetResult.resolved``). Apps with no plan
    that serves them are solved first; when the solver has a quick mode (a ``first_found`` keyword, as
    :func:`planner.robust.solve_dispatchable`) and solving them all in full would pass the budget (the
    CPU so far plus the rest at the mean of this epoch's full solves), the rest get the solver's quick
    plan, carried as above (``FleetResult.quick``), unless their previous plan has the same shape (only
    the rates changed: solved in full, as without a budget). Which apps are solved
    in an epoch depends on the CPU time taken; every plan is valid either way, and once none is carried
    every app has the solver plan an epoch without a budget gives it (its shaped and packed form can
    differ with the previous fleet). Bad parameters raise ValueError."""
    with _eased_collector():
        return _plan_fleet(
            problems,
            previous=previous,
            previous_plans=previous_plans,
            seeds=seeds,
            policy=policy,
            keeps=keeps,
            tighten=tighten,
            hold=hold,
            stick=stick,
            solver=solver,
            align=align,
            guard_s=guard_s,
            cache=cache,
            solve_budget_s=solve_budget_s,
        )


def _plan_fleet(
    problems: Mapping[str, ProblemSpec],
    *,
    previous: FleetPlan | None,
    previous_plans: Mapping[str, Plan] | None,
    seeds: Mapping[str, Plan] | None,
    policy: str,
    keeps: Sequence[float],
    tighten: float,
    hold: float,
    stick: float,
    solver: Callable[[ProblemSpec], Plan] | None,
    align: bool,
    guard_s: float,
    cache: RealisationCache | bool,
    solve_budget_s: float | None,
) -> FleetResult:
    if not 0 <= tighten < 1:
        raise ValueError(f"tighten must be a fraction in [0, 1), got {tighten}")
    started = time.perf_counter()
    if hold < 0:
        raise ValueError(f"hold must be a fraction >= 0, got {hold}")
    if stick < 0:
        raise ValueError(f"stick must be a fraction >= 0, got {stick}")
    if solve_budget_s is not None and not 0 <= solve_budget_s < math.inf:
        raise ValueError(f"solve_budget_s must be finite seconds >= 0 or None, got {solve_budget_s}")
    how = _Planning(
        policy,
        tighten,
        hold,
        stick,
        solver,
        _takes_keyword(solver, "schedules"),
        solve_budget_s,
        _takes_keyword(solver, "first_found"),
    )
    memo = _Memo((REALISATIONS if cache else None) if isinstance(cache, bool) else cache)
    done = _solve_all(problems, previous_plans or {}, seeds or {}, how, memo)
    solved = done.plans
    solved_at = time.perf_counter()
    last = _previous_keep(solved, sorted(done.unchanged))
    packing = _Packing(problems, previous, align, guard_s, memo)
    tried = sorted(set(keeps) | ({last} if last is not None else set()), reverse=True)
    shapes = _shape_all(problems, solved, tried, done.unchanged, memo)
    best: tuple[float, float, dict[str, Plan], FleetPlan, dict[str, Plan]] | None = None
    packed: list[tuple[dict[str, Plan], tuple[FleetPlan, dict[str, Plan]]]] = []
    for keep in tried:
        shaped = shapes[keep]
        # the same plans as another keep's (none shaped: carried, quick): the same fleet, not packed again
        same = next(
            (r for s, r in packed if s.keys() == shaped.keys() and all(s[a] is shaped[a] for a in s)), None
        )
        fleet, plans = same if same is not None else packing.pack(shaped)
        packed.append((shaped, (fleet, plans)))
        cost = fleet.billed_per_hour * (1 if keep == last else 1 + REPACK_THRESHOLD)
        if best is None or cost < best[0] - 1e-9:
            best = (cost, keep, shaped, fleet, plans)
    assert best is not None
    _, keep, shaped, fleet, plans = best
    alone = _dedicated_modules(fleet)
    restored = {a: _restored(problems[a], p, alone.get(a), memo.cache, memo.of(a)) for a, p in shaped.items()}
    if restored != shaped:
        fleet, plans = packing.pack(restored)
    if memo.cache is not None:
        memo.cache.rotate()
    solve_ms = (solved_at - started) * 1000
    pack_ms = (time.perf_counter() - solved_at) * 1000
    return FleetResult(
        plans,
        fleet,
        solve_ms,
        pack_ms,
        done.failed,
        done.reused,
        keep,
        done.seeded,
        carried=done.carried,
        resolved=done.resolved,
        quick=done.quick,
    )


@dataclass(frozen=True)
class _Packing:
    problems: Mapping[str, ProblemSpec]
    previous: FleetPlan | None
    align: bool
    guard_s: float
    memo: _Memo

    def pack(self, plans: Mapping[str, Plan]) -> tuple[FleetPlan, dict[str, Plan]]:
        """The fleet and the plans it runs (aligned modules with their raised rates and phases; a
        dispatch-realised plan re-realised). If a re-realised plan would miss its SLO, the fleet is
        packed without aligned duty cycles."""
        apps = {a: (self.problems[a], plans[a]) for a in plans}
        fleet = pack(apps, previous=self.previous, align=self.align, guard_s=self.guard_s)
        if not self.align or not any(i.aligned for i in fleet.instances):
            return fleet, dict(plans)
        phased = apply_phases(apps, fleet)
        for a, plan in phased.items():
            if plan is plans[a] or not realised(plan):
                continue
            again = redispatch(self.problems[a], plan, cache=self.memo.cache, schedules=self.memo.of(a))
            if again is None:
                return pack(apps, previous=self.previous), dict(plans)
            phased[a] = again
        return fleet, phased


def _shape_all(
    problems: Mapping[str, ProblemSpec],
    plans: Mapping[str, Plan],
    keeps: Sequence[float],
    reused: set[str],
    memo: _Memo,
) -> dict[float, dict[str, Plan]]:
    """Every app's plan shaped with every ``keep`` (but a carried plan not shaped before, a grown one:
    it is solved again soon). An app's shapes share its module schedules with its solve and its later
    realisations (a module the shaping leaves alone is not scheduled again)."""
    out: dict[float, dict[str, Plan]] = {k: {} for k in keeps}
    for a, plan in plans.items():
        schedules = memo.of(a)
        extra = plan.model_extra or {}
        for keep in keeps:
            if CARRIED_KEY in extra and KEEP_KEY not in extra:
                out[keep][a] = plan  # carried and grown: solved again soon, so not worth shaping
            else:
                out[keep][a] = _shaped(problems[a], plan, keep, a in reused, memo.cache, schedules)
    return out


def _shaped(
    problem: ProblemSpec,
    plan: Plan,
    keep: float,
    reused: bool,
    cache: RealisationCache | None,
    schedules: Schedules | None,
) -> Plan:
    if not _tc(plan):
        return plan
    if reused and (plan.model_extra or {}).get(KEEP_KEY) == keep:
        return plan
    return shape_plan(problem, plan, keep=keep, cache=cache, schedules=schedules)


def _restored(
    problem: ProblemSpec,
    plan: Plan,
    modules: set[str] | None,
    cache: RealisationCache | None,
    schedules: Schedules | None,
) -> Plan:
    """``plan`` with ``modules`` as solved; a dispatch-realised plan is realised again (a restored parent
    changes its children's bursts), and stays as shaped when that misses the SLO."""
    if not modules or not _tc(plan) or not isinstance((plan.model_extra or {}).get(SOLVED_KEY), dict):
        return plan  # (a plan not shaped has the solver's modules)
    out = restore_modules(problem, plan, modules)
    if not realised(plan):
        return out
    again = redispatch(problem, out, cache=cache, schedules=schedules)
    return again if again is not None else plan


def _dedicated_modules(fleet: FleetPlan) -> dict[str, set[str]]:
    """Per app, the modules none of whose shares shares an instance."""
    shared: set[tuple[str, str]] = set()
    every: set[tuple[str, str]] = set()
    for inst in fleet.instances:
        for s in inst.shares:
            every.add((s.app, s.module))
            if len(inst.shares) > 1:
                shared.add((s.app, s.module))
    out: dict[str, set[str]] = {}
    for app, module in every - shared:
        out.setdefault(app, set()).add(module)
    return out


def _previous_keep(plans: Mapping[str, Plan], reused: Sequence[str]) -> float | None:
    seen = {(plans[a].model_extra or {}).get(KEEP_KEY) for a in reused}
    seen.discard(None)
    if len(seen) != 1:
        return None
    value = next(iter(seen))
    return float(value) if isinstance(value, int | float) else None
