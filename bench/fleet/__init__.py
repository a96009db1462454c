"""Fleet benchmark: planning + packing epochs on generated multi-app fleets.

Prints, measured at run time (nothing is hard-coded):

- **cost**, per fleet size and seed: billed cost after packing over the occupancy lower bound (the sum of
  every app's occupancy-optimal plan, the fractional optimum no whole-instance fleet can beat), next to
  the dedicated billed plans (every app's plan from the solver, one instance per machine) and a
  latency-free packing of the occupancy plans (full machines alone, residuals bin-packed by occupancy with
  no latency condition; what packing could give if co-location cost no latency);
- **time** of one epoch (plan + pack) for the largest fleet, cold (a fresh process: nothing cached),
  *registered* (the same, but every app new since the last epoch was registered through the control
  loop, whose feasibility check solved it: the epoch takes those plans, :func:`~planner.fleet.seed_plan`,
  read back from JSON as from the registry; dispatchable solver only) and with every plan reused, for
  both solvers (``plain``: :func:`~planner.solve.solve`; ``dispatchable``:
  :func:`~planner.robust.solve_dispatchable`, what the control loop runs): CPU time of this process (one
  core) and wall time, median and spread of repeats, with the load average, the bill over the bound and
  the ``check_fleet`` / ``check_plan`` errors of the fleet timed; and the CPU of each registration's
  solve; and four changes of every app's problem at once, a **new price list** (:data:`PRICE_CHANGE`:
  every plan still valid), a **load ramp** (:data:`RAMP`: plans outgrown), a **load drop** (:data:`DROP`:
  plans over-provisioned past the hold band), **longer service times**
  (:data:`SLOWER_S`, a larger hop overhead: plans re-timed), and **no plan at all** (the same apps
  without previous plans): the epoch that solves every app at once against epochs with the control
  loop's solve budget (plans carried, grown where the rates outgrew them, quick plans where too many
  apps have none, solved again in later epochs, :func:`~planner.fleet.plan_fleet`'s
  ``solve_budget_s``), until none is carried, and whether they end with the same solver plans;
- **verification**: every shared instance replayed with its shares' window schedules (random phases and,
  per share, the phases that make it wait longest): measured worst case against planned + added wait;
- **steady load**: epochs of noisy load (rates drawn +-noise around a fixed mean, then Poisson counts over
  the epoch) per app's frame rate, forecast (:func:`~planner.scaling.forecast_rate`, as the control loop)
  + re-plan + pack + hysteresis; scale changes per hardware type per two epochs: in detail for the main
  fleet's first 40 apps, and summarised for ``steady_runs`` runs (run ``i``: the first 40 apps of the
  fleet of seed ``seed * 1000 + i``, noise seed ``seed + i``; run 0 is the detailed one).

Parts: :mod:`~bench.fleet.common` (targets, solvers), :mod:`~bench.fleet.cost`, :mod:`~bench.fleet.timing`
with :mod:`~bench.fleet.changes`, :mod:`~bench.fleet.steady` (verification and steady load),
:mod:`~bench.fleet.report` (tables, plot) and :mod:`~bench.fleet.command` (``skinflint bench fleet``).
"""

from __future__ import annotations

from bench.fleet.changes import (
    DROP,
    PRICE_CHANGE,
    RAMP,
    SLOWER_S,
    changed_problems,
    ramped,
    registrations,
    repriced,
    slowed,
    solved_plans,
    without_timings,
)
from bench.fleet.command import add_arguments, main, run, run_command
from bench.fleet.common import SOLVE_BUDGET_S, SOLVERS, TARGET_EPOCH_S, TARGET_RATIO, solver_for
from bench.fleet.cost import latency_free, load_occupancy, one_fleet
from bench.fleet.report import plot, render
from bench.fleet.steady import steady, steady_run, verify
from bench.fleet.timing import epoch_times

__all__ = [
    "DROP",
    "PRICE_CHANGE",
    "RAMP",
    "SLOWER_S",
    "SOLVERS",
    "SOLVE_BUDGET_S",
    "TARGET_EPOCH_S",
    "TARGET_RATIO",
    "add_arguments",
    "changed_problems",
    "epoch_times",
    "latency_free",
    "load_occupancy",
    "main",
    "one_fleet",
    "plot",
    "ramped",
    "registrations",
    "render",
    "repriced",
    "run",
    "run_command",
    "slowed",
    "solved_plans",
    "solver_for",
    "steady",
    "steady_run",
    "verify",
    "without_timings",
]
