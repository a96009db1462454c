"""A plan's machines as shares: which groups may share an instance, and each module's allowance of added
wait (its path slack shared among the co-locatable modules on the path)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from planner.packing.models import PackingError, Share

if TYPE_CHECKING:
    from planner.models import ModulePlan, Plan, ProblemSpec

__all__ = [
    "allowances",
    "colocatable_groups",
    "is_elastic",
    "plan_latency_model",
    "plan_shares",
    "share_name",
]

_REL = 1e-9


def _same_config(a: object, b: object) -> bool:
    keys = ("hardware", "batch", "concurrency", "duration_s", "overhead_s")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


def colocatable_groups(mp: ModulePlan, latency_model: str = "tc") -> dict[int, float]:
    """Groups of a module plan whose machines may share an instance, with each one's standalone worst
    case (s). Only TC plans whose windows are exactly periodic per machine qualify:

    - one group (one configuration, equal machines): every machine's windows are evenly spaced;
      standalone worst case: the module's;
    - ``[k machines at full throughput t, 1 machine at t / q]`` of one configuration (q >= 2 integer):
      the schedule's period holds q windows of every full machine and ONE of the residual, so the
      residual's windows are evenly spaced too. Its standalone worst case is the module's, less
      ``split_penalty_s`` when the plan records it (the b / W the full machines wait beyond
      Theorem 1, which the residual never waits: one window per period, load <= 1/2).
    """
    gs = mp.groups
    if latency_model != "tc" or not gs or any(g.duration_s <= 0 for g in gs):
        return {}
    wcl = mp.worst_case_latency_s
    if len(gs) == 1:
        return {0: wcl} if gs[0].rate_per_machine > 0 else {}
    if len(gs) == 2 and _same_config(gs[0], gs[1]) and gs[1].machines == 1:
        full, res = gs
        t = full.concurrency * full.batch / full.duration_s
        q = t / res.rate_per_machine if res.rate_per_machine > 0 else 0.0
        if (
            math.isclose(full.rate_per_machine, t, rel_tol=_REL)
            and q >= 2 - 1e-9
            and abs(q - round(q)) <= 1e-9 * q
        ):
            penalty = float((mp.model_extra or {}).get("split_penalty_s", 0.0))
            return {1: wcl - max(0.0, penalty)}
    return {}


def plan_shares(app: str, plan: Plan) -> list[Share]:
    """Every planned machine of ``plan`` as a share (not yet placed; no added wait)."""
    out: list[Share] = []
    for module, mp in plan.modules.items():
        for gi, g in enumerate(mp.groups):
            if g.duration_s <= 0:
                raise PackingError(f"app {app!r} module {module!r} group {gi}: no duration_s in the plan")
            t = g.concurrency * g.batch / g.duration_s
            out.extend(
                Share(
                    app=app,
                    module=module,
                    group=gi,
                    machine=m,
                    hardware=g.hardware,
                    batch=g.batch,
                    concurrency=g.concurrency,
                    duration_s=g.duration_s,
                    rate=g.rate_per_machine,
                    occupancy=g.rate_per_machine / t,
                    busy=g.rate_per_machine * g.duration_s / g.batch,
                )
                for m in range(g.machines)
            )
    return out


def plan_latency_model(plan: Plan) -> str:
    return str((plan.model_extra or {}).get("latency_model", "tc"))


# --------------------------------------------------------------------------- allowances


def allowances(problem: ProblemSpec, plan: Plan, colocatable: set[str]) -> dict[str, float]:
    """Added wait each module may take: every path's slack (SLO minus the planned worst cases) split
    evenly among the path's modules in ``colocatable``; a module on several paths takes the smallest."""
    out = dict.fromkeys(plan.modules, math.inf)
    for path in problem.paths():
        slack = problem.slo_s - sum(plan.modules[m].worst_case_latency_s for m in path)
        users = [m for m in path if m in colocatable]
        for m in users:
            out[m] = min(out[m], max(0.0, slack - 1e-9) / len(users))
    return {m: (0.0 if math.isinf(a) else a) for m, a in out.items()}


def is_elastic(mp: ModulePlan, latency_model: str = "tc") -> bool:
    """A module served by one machine of one configuration under TC: its windows are its batch
    intervals, ``b / f`` long and back to back, so a higher rate (more dummy load) shortens the interval
    to any common cycle >= d / c without lengthening its worst case (``d + b / f``)."""
    gs = mp.groups
    return (
        latency_model == "tc"
        and len(gs) == 1
        and gs[0].machines == 1
        and gs[0].rate_per_machine > 0
        and gs[0].duration_s > 0
    )


def share_name(s: Share) -> str:
    return f"{s.app}/{s.module}[{s.group}.{s.machine}]"
