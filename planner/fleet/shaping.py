"""Shaping a solved plan for packing: unfilled last machines and split residuals where the path slack pays
for them, and modules restored to their solved plan."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.fleet.keys import KEEP_KEY, SOLVED_KEY, SPLIT_KEY, solved_modules
from planner.fleet.realised import RealisationCache, realised, redispatch
from planner.models import MachineGroup, ModulePlan, Plan
from planner.split import topology

if TYPE_CHECKING:
    from collections.abc import Mapping

    from planner.fleet.realised import Schedules
    from planner.models import ProblemSpec

__all__ = ["module_costs", "restore_modules", "shape_plan"]

_CONFIG = ("hardware", "batch", "concurrency", "duration_s", "overhead_s")


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
        return self.group.duration_s + self.group.overhead_s + (2 if split else 1) * self.collect + self.extra


def _one_config(mp: ModulePlan) -> MachineGroup | None:
    gs = mp.groups
    if not gs or gs[0].duration_s <= 0:
        return None
    first = tuple(getattr(gs[0], k) for k in _CONFIG)
    return gs[0] if all(tuple(getattr(g, k) for k in _CONFIG) == first for g in gs) else None


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
        bound = g.duration_s + g.overhead_s + (2 if split else 1) * g.batch / load
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
    solved = solved_modules(plan)
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


def restore_modules(problem: ProblemSpec, plan: Plan, modules: set[str]) -> Plan:
    """``plan`` with ``modules`` back as the solver planned them."""
    solved = solved_modules(plan)
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
        o, b = module_costs(mp, prices)
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


def module_costs(mp: ModulePlan, prices: Mapping[str, float]) -> tuple[float, float]:
    """``mp``'s occupancy and billed cost ($/h) at ``prices``."""
    occ = billed = 0.0
    for g in mp.groups:
        t = g.concurrency * g.batch / g.duration_s if g.duration_s > 0 else math.inf
        occ += g.machines * prices[g.hardware] * g.rate_per_machine / t
        billed += g.machines * prices[g.hardware]
    return occ, billed
