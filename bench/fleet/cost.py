"""The fleet benchmark's cost: billed cost after packing over the occupancy lower bound, per fleet, beside
the dedicated plans, a FIFO-only packing and a latency-free packing; where the bill goes."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from bench.fleet.common import Reuse, fleet_errors, solver_for
from planner.errors import PlannerError
from planner.fleet import plan_fleet
from planner.solve import solve

if TYPE_CHECKING:
    from collections.abc import Mapping

    from planner.models import Plan, ProblemSpec


def _ffd(sizes: list[float]) -> int:
    bins: list[float] = []
    for size in sorted(sizes, reverse=True):
        for i, level in enumerate(bins):
            if level + size <= 1 + 1e-9:
                bins[i] += size
                break
        else:
            bins.append(size)
    return len(bins)


def latency_free(plans: Mapping[str, Plan], prices: Mapping[str, float]) -> float:
    """$/h of a fleet where every module's load is whole machines plus one residual and residuals are
    bin-packed by occupancy alone (first-fit decreasing), ignoring latency."""
    items: dict[str, list[float]] = defaultdict(list)
    for plan in plans.values():
        for mp in plan.modules.values():
            for group in mp.groups:
                units = (
                    group.machines
                    * group.rate_per_machine
                    * group.duration_s
                    / (group.concurrency * group.batch)
                )
                whole = math.floor(units + 1e-9)
                items[group.hardware] += [1.0] * whole + ([units - whole] if units - whole > 1e-9 else [])
    return sum(_ffd(sizes) * prices[hw] for hw, sizes in items.items())


def load_occupancy(
    plans: Mapping[str, Plan], problems: Mapping[str, ProblemSpec], prices: Mapping[str, float]
) -> float:
    """$/h of the device time the apps' own requests take on their plans' machines: each module's rate
    fills its groups in throughput-cost order (as the TC dispatch sends it), each request costing
    ``price * d / (c b)`` of its group's configuration. The rest of a plan's occupancy is capacity
    held for what the plan guarantees (dummy load: whole machines, children sized for their parents'
    worst-case bursts)."""
    total = 0.0
    for app, plan in plans.items():
        for name, mp in plan.modules.items():
            left = problems[app].modules[name].rate
            for group in mp.groups:
                real = min(left, group.machines * group.rate_per_machine)
                left -= real
                total += prices[group.hardware] * real * group.duration_s / (group.concurrency * group.batch)
    return total


def one_fleet(problems: Mapping[str, ProblemSpec], solver: str = "dispatchable") -> dict[str, Any]:
    """Every figure of one generated fleet, planned with ``solver`` (:data:`SOLVERS`)."""
    occ: dict[str, Plan] = {}
    plans = Reuse(solver_for(solver))
    billed_opt = 0.0
    for app, problem in problems.items():
        try:
            lower = solve(problem, objective="occupancy")
            billed = plans(problem).billed_per_hour
        except PlannerError:  # counted as failed: the bound is over the apps both solves plan
            continue
        occ[app] = lower
        billed_opt += billed
    feasible = {app: problems[app] for app in occ}
    res = plan_fleet(feasible, solver=plans)
    fifo = plan_fleet(feasible, align=False, solver=plans)
    errors = fleet_errors(feasible, res)
    lb = sum(plan.cost_per_hour for plan in occ.values())
    fleet = res.fleet
    return {
        "apps": len(problems),
        "planned": len(res.plans),
        "failed": len(res.failed) + len(problems) - len(feasible),
        "occupancy_bound": lb,
        "billed": fleet.billed_per_hour,
        "plans_occupancy": fleet.occupancy_per_hour,
        "load_occupancy": load_occupancy(res.plans, feasible, fleet.prices),
        "packing_ratio": fleet.billed_per_hour / fleet.occupancy_per_hour,
        "dedicated_plans": fleet.dedicated_per_hour,
        "dedicated_billed_optimum": billed_opt,
        "latency_free": latency_free(occ, fleet.prices),
        "ratio": fleet.billed_per_hour / lb,
        "fifo_only_ratio": fifo.fleet.billed_per_hour / lb,
        "aligned_instances": sum(1 for instance in fleet.instances if instance.aligned),
        "dedicated_ratio": billed_opt / lb,
        "latency_free_ratio": latency_free(occ, fleet.prices) / lb,
        "instances": len(fleet.instances),
        "shared_instances": fleet.shared_instances,
        "shares_on_shared": sum(
            len(instance.shares) for instance in fleet.instances if len(instance.shares) > 1
        ),
        "keep": res.keep,
        "errors": errors[:5],
        "error_count": len(errors),
        "_fleet": res,
        "_problems": feasible,
    }


def by_size(fleets: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for size in sorted({fleet["size"] for fleet in fleets}):
        rs = [fleet for fleet in fleets if fleet["size"] == size]
        ratio = [fleet["ratio"] for fleet in rs]
        out[size] = {
            "fleets": len(rs),
            "ratio_median": statistics.median(ratio),
            "ratio_min": min(ratio),
            "ratio_max": max(ratio),
            "dedicated_ratio_median": statistics.median(fleet["dedicated_ratio"] for fleet in rs),
            "fifo_only_ratio_median": statistics.median(fleet["fifo_only_ratio"] for fleet in rs),
            "aligned_instances_median": statistics.median(fleet["aligned_instances"] for fleet in rs),
            "latency_free_ratio_median": statistics.median(fleet["latency_free_ratio"] for fleet in rs),
            "packing_ratio_median": statistics.median(fleet["packing_ratio"] for fleet in rs),
            "load_ratio_median": statistics.median(
                fleet["load_occupancy"] / fleet["occupancy_bound"] for fleet in rs
            ),
            "plans_ratio_median": statistics.median(
                fleet["plans_occupancy"] / fleet["occupancy_bound"] for fleet in rs
            ),
            "shared_instances_median": statistics.median(fleet["shared_instances"] for fleet in rs),
            "errors": sum(fleet["error_count"] for fleet in rs),
        }
    return out
