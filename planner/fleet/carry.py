"""Plans carried over a change of their app's problem: kept at the new rates where they still hold, grown
by whole machines where they fall short, or re-timed to the new SLO."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any, cast

from planner.check import check_plan
from planner.errors import PlannerError
from planner.fleet.keys import (
    CARRIED_KEY,
    DIGEST_KEY,
    KEEP_KEY,
    RATES_KEY,
    SHAPE_KEY,
    SOLVED_KEY,
    is_tc,
    solved_modules,
)
from planner.fleet.realised import RealisationCache, realised, realised_or_not, redispatch
from planner.fleet.shaping import module_costs
from planner.models import MachineGroup, ModulePlan, Plan
from planner.split import topology

if TYPE_CHECKING:
    from collections.abc import Mapping

    from planner.fleet.planning import Planning
    from planner.fleet.realised import Schedules
    from planner.models import ProblemSpec
    from planner.robust import Realisation

__all__ = ["GROW_ROUNDS", "at_rates", "carry_plan", "sticky_plan"]


def carry_plan(
    problem: ProblemSpec,
    old: Plan | None,
    digest: str,
    shape: str,
    how: Planning,
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
    :func:`sticky_plan` as an epoch without a budget solves it). The costs are those of the new prices. None
    otherwise: the app is solved now."""
    if how.budget is None or old is None or how.tighten > 0 or not is_tc(old):
        return None
    prices = {h: x.price_per_hour for h, x in problem.hardware.items()}
    solved = solved_modules(old)
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
            "cost_per_hour": sum(module_costs(mp, prices)[0] for mp in modules.values()),
            "billed_per_hour": sum(module_costs(mp, prices)[1] for mp in modules.values()),
            **extra,
        }
    )
    # the served (shaped) plan as it is, unless its service times changed (then the solver's, grown);
    # rates that fell past the hold band too: the plan serves them (it is solved again soon)
    serves = not retimed and _serves(problem, priced, math.inf)
    held = at_rates(problem, priced, digest, cache, schedules) if serves else None
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
    profile, with the profile's duration (a machine then carries at most the profile's throughput) and
    overhead,
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
        same = same and e.overhead_s == g.overhead_s
        if same and g.rate_per_machine <= e.throughput * (1 + 1e-9):
            groups.append(g)
        else:
            rate = min(g.rate_per_machine, e.throughput)
            update = {"duration_s": e.duration_s, "overhead_s": e.overhead_s, "rate_per_machine": rate}
            groups.append(g.model_copy(update=update))
        ratios.append(e.throughput / prices[g.hardware])
    if not all(a >= b * (1 - 1e-12) for a, b in itertools.pairwise(ratios)):
        return None
    if all(a is b for a, b in zip(groups, mp.groups, strict=True)):
        return mp
    return mp.model_copy(update={"groups": groups})


def _priced(mp: ModulePlan, prices: Mapping[str, float]) -> ModulePlan:
    """``mp`` with its occupancy and billed cost at ``prices``."""
    occ, billed = module_costs(mp, prices)
    return mp.model_copy(update={"occupancy_per_hour": occ, "billed_per_hour": billed})


def sticky_plan(
    problem: ProblemSpec,
    old: Plan,
    fresh: Plan,
    how: Planning,
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
        return _bounded(grown, fresh)
    before = _configs(solved_modules(old))
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
    return _bounded(kept, fresh)


def _bounded(plan: Plan, fresh: Plan) -> Plan:
    """``plan`` with the certified bound of ``fresh`` (the solve of the problem it now serves; the old
    plan's bound was another problem's, a restricted solve's bounds the restricted problem only) and the
    proven gap that gives ``plan``. Unchanged when ``fresh`` records no bound field."""
    extra = fresh.model_extra or {}
    if "lower_bound_per_hour" not in extra:
        return plan
    bound = extra["lower_bound_per_hour"]
    cost = plan.billed_per_hour if plan.objective == "billed" else plan.cost_per_hour
    gap = None if bound is None else (max(0.0, (cost - bound) / cost) if cost > 0 else 0.0)
    return plan.model_copy(update={"lower_bound_per_hour": bound, "proven_gap": gap})


def _configs(modules: Mapping[str, ModulePlan]) -> dict[str, set[tuple[str, int, int]]]:
    """Per module, the configurations (hardware, batch, concurrency) its machine groups use."""
    return {
        m: {(g.hardware, g.batch, g.concurrency) for g in mp.groups if g.machines > 0}
        for m, mp in modules.items()
    }


def _grown(problem: ProblemSpec, plan: Plan, hold: float) -> Plan | None:
    """The solver's plan behind ``plan`` with more machines in each module's first group (the highest
    throughput-cost ratio) until its planned rate covers the new rate; None when a rate fell more than
    ``hold`` below the one it was solved for. Under TC more load only shortens every worst case (Theorem 1:
    w grows), so the plan's figures stay valid bounds."""
    solved_rates = (plan.model_extra or {}).get(RATES_KEY)
    if not isinstance(solved_rates, dict) or set(solved_rates) != set(problem.modules) or not is_tc(plan):
        return None
    prices = {h: x.price_per_hour for h, x in problem.hardware.items()}
    modules: dict[str, ModulePlan] = {}
    occ = billed = 0.0
    for m, mp in solved_modules(plan).items():
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
        o, b = module_costs(mp.model_copy(update={"groups": groups}), prices)
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
            real = realised_or_not(problem, grown, schedules)[1]
        need = _shortfall(problem, grown, real)
        if not need:
            return None
        grown = _with_capacity(problem, grown, need)
        out, real = realised_or_not(problem, grown, schedules)
    return out


def _shortfall(problem: ProblemSpec, plan: Plan, real: Mapping[str, Realisation]) -> dict[str, float]:
    """The planned rate (req/s) modules of ``plan`` need so that it realises, from its realisation
    ``real``. Each module whose spread falls short of its parents' bursts (not collision free): its rate
    scaled by required / capacity rate, and at least the required rate, 2 % over (its own schedule
    changes with its machines). If none, for each path over the SLO the module on it with the longest
    wait for its batch (realised worst case less its least latency floor, duration plus overhead) gets
    one machine more of its
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
            floors = (g.duration_s + g.overhead_s for g in plan.modules[m].groups)
            return real[m].worst_case_s - min(floors, default=0.0)

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
        occ, billed = module_costs(mp.model_copy(update={"groups": groups}), prices)
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
            "cost_per_hour": sum(module_costs(mp, prices)[0] for mp in modules.values()),
            "billed_per_hour": sum(module_costs(mp, prices)[1] for mp in modules.values()),
        }
    )


def at_rates(
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
        problem, held.model_copy(update={"modules": solved_modules(held)}), cache=cache, schedules=schedules
    )
    if base is None:
        return None
    recorded = {m: mp.model_dump() for m, mp in base.modules.items()}
    return again.model_copy(update={SOLVED_KEY: recorded})
