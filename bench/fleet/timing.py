"""The fleet benchmark's time: one epoch (plan + pack) cold, registered and with every plan reused, for
both solvers, with the changes of :mod:`bench.fleet.changes` after each."""

from __future__ import annotations

import math
import os
import time
from typing import TYPE_CHECKING, Any

from bench.fleet.changes import change_summary, changed_problems, registrations
from bench.fleet.common import fleet_errors, solver_for, summary_ms
from planner.errors import PlannerError
from planner.fleet import RealisationCache, plan_fleet
from planner.solve import solve

if TYPE_CHECKING:
    from collections.abc import Mapping

    from planner.models import ProblemSpec


def epoch_times(problems: Mapping[str, ProblemSpec], repeats: int, solver: str) -> dict[str, Any]:
    """One epoch of ``problems`` planned with ``solver``, ``repeats`` times: cold (no previous plans, an
    empty realisation cache: a fresh control-loop process), registered (the same with every app's
    registration plan as its seed; ``dispatchable`` only) and then with every plan reused (the next
    epoch of the same process); CPU (this process) and wall time, the bill over the occupancy bound and
    the errors ``check_fleet`` / ``check_plan`` find in the fleet; then, each time, a new price list
    and a load ramp (:func:`changed_problems`)."""
    cold_cpu, cold_wall, warm_cpu, warm_wall = [], [], [], []
    changes: dict[str, list[dict[str, Any]]] = {
        "prices": [],
        "ramp": [],
        "drop": [],
        "slower": [],
        "cold": [],
    }
    cold_solve, cold_pack, warm_pack = [], [], []
    reg_cpu: list[float] = []
    reg_wall: list[float] = []
    first = again = seeded = None
    seeds, solve_cpu = registrations(problems) if solver == "dispatchable" else ({}, [])
    load = [os.getloadavg()]
    for _ in range(repeats):
        cache = RealisationCache()
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        first = plan_fleet(problems, solver=solver_for(solver), cache=cache)
        cold_cpu.append((time.process_time() - cpu_start) * 1000)
        cold_wall.append((time.perf_counter() - wall_start) * 1000)
        cold_solve.append(first.solve_ms)
        cold_pack.append(first.pack_ms)
        if seeds:
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            seeded = plan_fleet(problems, seeds=seeds, solver=solver_for(solver), cache=RealisationCache())
            reg_cpu.append((time.process_time() - cpu_start) * 1000)
            reg_wall.append((time.perf_counter() - wall_start) * 1000)
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        again = plan_fleet(
            problems, previous=first.fleet, previous_plans=first.plans, solver=solver_for(solver), cache=cache
        )
        warm_cpu.append((time.process_time() - cpu_start) * 1000)
        warm_wall.append((time.perf_counter() - wall_start) * 1000)
        warm_pack.append(again.pack_ms)
        for change, runs in changes.items():
            runs.append(changed_problems(problems, first, solver, change))
        load.append(os.getloadavg())
    assert first is not None and again is not None
    occ = 0.0
    for problem in problems.values():
        try:
            occ += solve(problem, objective="occupancy").cost_per_hour
        except PlannerError:
            continue
    return {
        "solver": solver,
        "apps": len(problems),
        "planned": len(first.plans),
        "repeats": repeats,
        "cold_cpu": summary_ms(cold_cpu),
        "cold_wall": summary_ms(cold_wall),
        "cold_solve_wall": summary_ms(cold_solve),
        "cold_shape_pack_wall": summary_ms(cold_pack),
        "registered_cpu": summary_ms(reg_cpu) if reg_cpu else None,
        "registered_wall": summary_ms(reg_wall) if reg_wall else None,
        "registration_solve_cpu": summary_ms(solve_cpu) if solve_cpu else None,
        "seeded_apps": len(seeded.seeded) if seeded is not None else 0,
        "same_fleet_seeded": None if seeded is None else seeded.fleet == first.fleet,
        "reused_cpu": summary_ms(warm_cpu),
        "reused_wall": summary_ms(warm_wall),
        "reused_shape_pack_wall": summary_ms(warm_pack),
        "reused_apps": len(again.reused),
        "ratio": first.fleet.billed_per_hour / occ if occ > 0 else math.nan,
        "errors": len(fleet_errors(problems, first)),
        "reused_errors": len(fleet_errors(problems, again)),
        "same_fleet_reused": first.fleet.instances == again.fleet.instances,
        "changed": {change: change_summary(runs) for change, runs in changes.items()},
        "load_avg": [min(reading[0] for reading in load), max(reading[0] for reading in load)],
    }
