"""Longer windows for modules with children: less dummy load where the latency budget has room.

A TC plan fills its machines with dummy requests (W = machines x throughput), so that its windows
(b / W) are as short as the machines allow. Under Theorem 1 alone that costs nothing. Realised, it
does: a window of a module with children may hold a request whatever its length (a root's frames are
not spaced; a child's stream is spaced at its spread rate, which can exceed its rate), and every
non-empty window sends a burst of children that must be spread before the next window completes
(docs/dispatch.md). The shorter the windows, the higher the spread rate the children must be planned
for, and down a chain of modules that compounds: a root at 7 req/s on a machine of 67 req/s hands its
child bursts every 15 ms, which the child needs 200 req/s of capacity for, instead of every 137 ms.

:func:`stretch_windows` gives such a module, on the same machines, the smallest window rate ``W`` (its
planned rate at least) whose Theorem-1 figure ``d + o + b / W`` is within its Theorem-1 figure plus
``fraction`` of its slack (latency budget minus that figure). The bill is unchanged (the same
machines); the occupancy cost falls with the dummy load; the module's worst case grows within its
budget, so the plan stays valid (:func:`planner.check.check_plan`). Whether the children gain more
than the longer windows cost on the paths is what realising the plan decides: the dispatch-aware
solve (:func:`planner.robust.solve_dispatchable`) tries the rounds with stretched windows beside the
unstretched ones and keeps the cheapest realisable plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.split import topology

if TYPE_CHECKING:
    from planner.models import ModulePlan, Plan, ProblemSpec

__all__ = ["STRETCHES", "stretch_windows"]

#: The fractions of their slack the dispatch-aware solve's stretched rounds give modules with children
#: (0: the plain plan's windows). Each alone, every round stretched, realised fewer of 24 generated
#: 5-10-module problems (seed 0) than the unstretched rounds (16 at 0.5, 11 at 1.0, against 19), while
#: the three tried together realise 20 and bill the 19 that both realise 263.9 $/h instead of 431.7:
#: neither dominates, so all are tried (docs/dispatch.md, step 4).
STRETCHES = (0.0, 0.5, 1.0)


def stretch_windows(problem: ProblemSpec, plan: Plan, fraction: float) -> Plan:
    """``plan`` with each one-configuration module that has children given the longest windows
    within its Theorem-1 figure plus ``fraction`` (0..1) of its slack (module doc); ``plan`` itself
    when ``fraction`` is 0 or no module changes. ``problem``: the problem ``plan`` solved (its rates are
    the planned rates the windows never go below)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be within 0..1, got {fraction}")
    if fraction == 0.0:
        return plan
    children = topology(problem).children
    modules: dict[str, ModulePlan] = {}
    for name, mp in plan.modules.items():
        stretched = _stretched(mp, problem.modules[name].rate, fraction) if children[name] else None
        if stretched is not None:
            modules[name] = stretched
    if not modules:
        return plan
    modules = {name: modules.get(name, mp) for name, mp in plan.modules.items()}
    occupancy = sum(float((mp.model_extra or {}).get("occupancy_per_hour", 0.0)) for mp in modules.values())
    return plan.model_copy(update={"modules": modules, "cost_per_hour": occupancy})


def _stretched(mp: ModulePlan, rate: float, fraction: float) -> ModulePlan | None:
    if len(mp.groups) != 1:
        return None
    (group,) = mp.groups
    floor = group.duration_s + group.overhead_s
    window_rate = group.machines * group.rate_per_machine
    target = mp.worst_case_latency_s + fraction * (mp.latency_budget_s - mp.worst_case_latency_s)
    if target <= floor:
        return None
    # the planned rate is what the groups carry less the dummy load (at least the problem's rate)
    planned = max(rate, window_rate - mp.dummy_rate)
    new_rate = max(planned, group.batch / (target - floor))
    if new_rate >= window_rate * (1 - 1e-9):
        return None
    per_machine = new_rate / group.machines
    extra = dict(mp.model_extra or {})
    if "occupancy_per_hour" in extra:  # the papers' cost: the same machines, less dummy load
        extra["occupancy_per_hour"] = float(extra["occupancy_per_hour"]) * new_rate / window_rate
    return mp.model_copy(
        update={
            "groups": [group.model_copy(update={"rate_per_machine": per_machine})],
            "dummy_rate": max(0.0, mp.dummy_rate - (window_rate - new_rate)),
            "worst_case_latency_s": floor + group.batch / new_rate,
            **extra,
        }
    )
