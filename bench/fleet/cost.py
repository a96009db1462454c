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
    for s in sorted(sizes, reverse=True):
        for i, b in enumerate(bins):
            if b + s <= 1 + 1e-9:
                bins[i] += s
                break
        else:
            bins.append(s)
    return len(bins)


def latency_free(plans: Mapping[str, Plan], prices: Mapping[str, float]) -> float:
    """$/h of a fleet where every module's load is whole machines plus one residual and residuals are
    bin-packed by occupancy alone (first-fit decreasing), ignoring latency."""
    items: dict[str, list[float]] = defaultdict(list)
    for plan in plans.values():
        for mp in plan.modules.values():
            for g in mp.groups:
                units = g.machines * g.rate_per_machine * g.duration_s / (g.concurrency * g.batch)
                k = math.floor(units + 1e-9)
                items[g.hardware] += [1.0] * k + ([units - k] if units - k > 1e-9 else [])
    return sum(_ffd(v) * prices[h] for h, v in items.items())


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
            for g in mp.groups:
                real = min(left, g.machines * g.rate_per_machine)
                left -= real
                total += prices[g.hardware] * real * g.duration_s / (g.concurrency * g.batch)
    return total


def one_fleet(problems: Mapping[str, ProblemSpec], solver: str = "dispatchable") -> dict[str, Any]:
    """Every figure of one generated fleet, planned with ``solver`` (:data:`SOLVERS`)."""
    occ: dict[str, Plan] = {}
    plans = Reuse(solver_for(solver))
    billed_opt = 0.0
    for app, p in problems.items():
        try:
            lower = solve(p, objective="occupancy")
            billed = plans(p).billed_per_hour
        except PlannerError:  # counted as failed: the bound is over the apps both solves plan
            continue
        occ[app] = lower
        billed_opt += billed
    feasible = {a: problems[a] for a in occ}
    res = plan_fleet(feasible, solver=plans)
    fifo = plan_fleet(feasible, align=False, solver=plans)
    errors = fleet_errors(feasible, res)
    lb = sum(p.cost_per_hour for p in occ.values())
    f = res.fleet
    return {
        "apps": len(problems),
        "planned": len(res.plans),
        "failed": len(res.failed) + len(problems) - len(feasible),
        "occupancy_bound": lb,
        "billed": f.billed_per_hour,
        "plans_occupancy": f.occupancy_per_hour,
        "load_occupancy": load_occupancy(res.plans, feasible, f.prices),
        "packing_ratio": f.billed_per_hour / f.occupancy_per_hour,
        "dedicated_plans": f.dedicated_per_hour,
        "dedicated_billed_optimum": billed_opt,
        "latency_free": latency_free(occ, f.prices),
        "ratio": f.billed_per_hour / lb,
        "fifo_only_ratio": fifo.fleet.billed_per_hour / lb,
        "aligned_instances": sum(1 for i in f.instances if i.aligned),
        "dedicated_ratio": billed_opt / lb,
        "latency_free_ratio": latency_free(occ, f.prices) / lb,
        "instances": len(f.instances),
        "shared_instances": f.shared_instances,
        "shares_on_shared": sum(len(i.shares) for i in f.instances if len(i.shares) > 1),
        "keep": res.keep,
        "errors": errors[:5],
        "error_count": len(errors),
        "_fleet": res,
        "_problems": feasible,
    }


def by_size(fleets: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for size in sorted({f["size"] for f in fleets}):
        rs = [f for f in fleets if f["size"] == size]
        ratio = [f["ratio"] for f in rs]
        out[size] = {
            "fleets": len(rs),
            "ratio_median": statistics.median(ratio),
            "ratio_min": min(ratio),
            "ratio_max": max(ratio),
            "dedicated_ratio_median": statistics.median(f["dedicated_ratio"] for f in rs),
            "fifo_only_ratio_median": statistics.median(f["fifo_only_ratio"] for f in rs),
            "aligned_instances_median": statistics.median(f["aligned_instances"] for f in rs),
            "latency_free_ratio_median": statistics.median(f["latency_free_ratio"] for f in rs),
            "packing_ratio_median": statistics.median(f["packing_ratio"] for f in rs),
            "load_ratio_median": statistics.median(f["load_occupancy"] / f["occupancy_bound"] for f in rs),
            "plans_ratio_median": statistics.median(f["plans_occupancy"] / f["occupancy_bound"] for f in rs),
            "shared_instances_median": statistics.median(f["shared_instances"] for f in rs),
            "errors": sum(f["error_count"] for f in rs),
        }
    return out
