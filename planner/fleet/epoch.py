"""One planning epoch: solve, shape with each ``keep``, pack, keep the cheapest fleet, restore dedicated
modules and pack once more."""

from __future__ import annotations

import contextlib
import gc
import math
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.fleet.keys import CARRIED_KEY, KEEP_KEY, SOLVED_KEY, is_tc
from planner.fleet.planning import Memo, Planning, takes_keyword
from planner.fleet.realised import REALISATIONS, RealisationCache, realised, redispatch
from planner.fleet.shaping import restore_modules, shape_plan
from planner.fleet.solving import solve_all
from planner.packing import ALIGN_GUARD_S, REPACK_THRESHOLD, FleetPlan, apply_phases, pack

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from planner.fleet.realised import Schedules
    from planner.models import Plan, ProblemSpec

__all__ = ["EPOCH_GC_THRESHOLDS", "FleetResult", "KEEPS", "plan_fleet"]

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
    changed service times; rates past its capacity served by the plan grown as above: :func:`carry_plan`);
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
    how = Planning(
        policy,
        tighten,
        hold,
        stick,
        solver,
        takes_keyword(solver, "schedules"),
        solve_budget_s,
        takes_keyword(solver, "first_found"),
    )
    memo = Memo((REALISATIONS if cache else None) if isinstance(cache, bool) else cache)
    done = solve_all(problems, previous_plans or {}, seeds or {}, how, memo)
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
    memo: Memo

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
    memo: Memo,
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
    if not is_tc(plan):
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
    if not modules or not is_tc(plan) or not isinstance((plan.model_extra or {}).get(SOLVED_KEY), dict):
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
