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

Modules: :mod:`.keys` (plan extras), :mod:`.realised` (realisations and their cache), :mod:`.shaping`
(shaping for packing), :mod:`.planning` and :mod:`.solving` (the solve phase), :mod:`.carry` (carried
plans), :mod:`.epoch` (:func:`plan_fleet`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.fleet.epoch import EPOCH_GC_THRESHOLDS, KEEPS, FleetResult, plan_fleet
from planner.fleet.keys import (
    CARRIED_KEY,
    DIGEST_KEY,
    FULL_SOLVE_KEY,
    KEEP_KEY,
    RATES_KEY,
    SHAPE_KEY,
    SOLVED_KEY,
    SPLIT_KEY,
    problem_digest,
    seed_plan,
)
from planner.fleet.planning import ScheduleSharingSolver
from planner.fleet.realised import REALISATIONS, RealisationCache, realised, redispatch
from planner.fleet.shaping import restore_modules, shape_plan
from planner.packing import FleetPlan, Instance, Share

if TYPE_CHECKING:
    from planner.fleet.realised import Schedules as Schedules  # the type alias, for type checkers

__all__ = [
    "FleetPlan",
    "Instance",
    "Share",
    "CARRIED_KEY",
    "DIGEST_KEY",
    "FULL_SOLVE_KEY",
    "EPOCH_GC_THRESHOLDS",
    "FleetPlan",
    "FleetResult",
    "Instance",
    "KEEPS",
    "KEEP_KEY",
    "RATES_KEY",
    "REALISATIONS",
    "RealisationCache",
    "SHAPE_KEY",
    "SOLVED_KEY",
    "SPLIT_KEY",
    "ScheduleSharingSolver",
    "Share",
    "plan_fleet",
    "problem_digest",
    "realised",
    "redispatch",
    "restore_modules",
    "seed_plan",
    "shape_plan",
]
