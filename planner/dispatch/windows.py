"""What fronts and workers read off a plan and its schedule: the spread rate of a burst, a root's window
caps and the schedule's origin."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from planner.latency import EPS

if TYPE_CHECKING:
    from planner.dispatch.schedule import DispatchSchedule
    from planner.models import ModulePlan

__all__ = ["PHASE_KEY", "planned_spread_rate", "root_window_caps", "schedule_origin"]

#: Module plan extra: the module's schedule phase (s after t = 0 of the wall clock, mod its period),
#: chosen by the fleet packer for aligned duty cycles (planner.packing.apply_phases).
PHASE_KEY = "schedule_phase_s"


# --------------------------------------------------------------------------- spreading bursts


def planned_spread_rate(module_plan: ModulePlan, default: float) -> float:
    """Rate (req/s) at which a burst of this module's requests (the children of one parent batch) is
    dispatched: ``k``-th request at ``arrival + k / rate``. A dispatch-aware plan
    (:func:`planner.robust.solve_dispatchable`) records it as ``dispatch.spread_rate``; other plans use
    ``default`` (the caller's: the simulator its schedule's effective rate, the router the planned rate)."""
    info = (module_plan.model_extra or {}).get("dispatch")
    rate = info.get("spread_rate") if isinstance(info, dict) else None
    return float(rate) if isinstance(rate, int | float) and rate > 0 else default


def root_window_caps(
    module_plan: ModulePlan, schedule: DispatchSchedule, *, has_children: bool = True
) -> list[int]:
    """Frames each window of a root module's schedule may take (one per window of a period, in order).

    Its batch, and for a root with children in a dispatch-aware plan (one that records the root's
    stream rate ``r`` as ``dispatch.spread_rate``) no more than ``ceil(r * length)``: what the
    realisation assumed the window holds when it sized the children for the bursts this window's batch
    sends them (:func:`planner.robust.required_spread_rate`). The front's admission keeps every window
    within it (spilling or shedding the rest), so the children's guarantee holds whatever the arrival
    process; with the batch as the only cap, Poisson frames overflowed the children of 10 of 100
    generated apps in the simulator (docs/dispatch.md, "Admission and the arrival process"). A root
    without children takes its batch: its own machine's figures hold for any window of at most ``b``."""
    start, end, _, _, batch = schedule.window_lists()
    rate = planned_spread_rate(module_plan, 0.0) if has_children else 0.0
    if rate <= 0:
        return [int(b) for b in batch]
    return [min(int(b), math.ceil(rate * (e - s0) - EPS)) for s0, e, b in zip(start, end, batch, strict=True)]


def schedule_origin(app_origin_s: float, module_plan: ModulePlan, period_s: float) -> float:
    """Origin of a module's schedule (epoch seconds): the app's origin, or, when the plan fixes the
    module's phase (``schedule_phase_s``: shares of an aligned instance take turns in a duty cycle),
    the latest time ``<= app_origin_s`` congruent to that phase modulo the schedule period. Fronts and
    workers compute it alike from the deployment, so they agree on every window; the workers of one
    instance then start their batches at the turns the packer chose (on the instance's one clock)."""
    phase = (module_plan.model_extra or {}).get(PHASE_KEY)
    if not isinstance(phase, int | float) or not period_s > 0:
        return app_origin_s
    back = (app_origin_s - float(phase)) % period_s
    if period_s - back <= 1e-9 * period_s:  # float rounding of an exact multiple
        back = 0.0
    return app_origin_s - back
