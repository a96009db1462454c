"""``skinflint bench planner --suite epoch``: cold epochs of a generated fleet under the control loop's
solve budget, and each app's proven gap (issue #29).

For each seed, ``apps`` generated problems (``small``: :mod:`planner.generate`, 1-4 modules, as ``skinflint
bench fleet``; ``large``: :mod:`planner.generate_large`, 5-10 modules) with no plan at all are planned by
:func:`planner.fleet.plan_fleet` with the control loop's solver (:func:`control.planning.dispatch_solver`:
the dispatch-aware solve, billed, the given ``solve_budget_s``) epoch after epoch, each from the
previous one's plans with one realisation cache (one control-loop process), until no plan is carried
(or ``max_epochs``). Per epoch: CPU of this process (one core) and wall time, apps given a quick plan,
still carried, solved again, failed; the apps whose plan carries a proven gap
(:func:`planner.fleet.keys.proven_gap`: the solver's certified bound on the plain problem against the
plan's billed cost) and how many are within 1 %; the fleet's bill. Then the unbudgeted epoch (every app
solved in full at once: the budget a cold epoch would need) and, for the last epoch's plans, where the
gaps come from: the apps whose bound is the plain problem's *proven optimum* (their gap is then exactly
the price of realisability, ``price_of_realisability``, against a bound that no realisable plan can go
below, since a realisable plan is a plain plan) and whether the solve's search over realised plans was
complete (``dispatch_search.complete``). Nothing is hard-coded: every figure is measured by the run.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from bench.results import emit, host_line
from control.config import ControlConfig
from control.planning import dispatch_solver
from planner.fleet import RealisationCache, plan_fleet
from planner.fleet.keys import proven_gap
from planner.generate import generate_problems
from planner.generate_large import generate_large_problems

if TYPE_CHECKING:
    from bench.results import Recording
    from planner.models import Plan, ProblemSpec

SHAPES = ("small", "large")
WITHIN = 0.01  # the target: every app's gap <= 1 %


def fleet_problems(apps: int, seed: int, shape: str) -> dict[str, ProblemSpec]:
    """``apps`` generated problems named ``app000``...: 1-4 modules (``small``) or 5-10 (``large``)."""
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}, got {shape!r}")
    gen = generate_problems if shape == "small" else generate_large_problems
    return {f"app{i:03d}": problem for i, problem in enumerate(gen(apps, seed))}


def _gaps(plans: dict[str, Plan]) -> dict[str, Any]:
    gaps = [g for g in (proven_gap(p) for p in plans.values()) if g is not None]
    return {
        "with_gap": len(gaps),
        "within_1pct": sum(g <= WITHIN + 1e-12 for g in gaps),
        "median_gap": statistics.median(gaps) if gaps else None,
        "max_gap": max(gaps) if gaps else None,
    }


def _sources(plans: dict[str, Plan]) -> dict[str, Any]:
    """Where the last epoch's gaps come from (module doc)."""
    over = [p for p in plans.values() if (g := proven_gap(p)) is not None and g > WITHIN + 1e-12]
    at_plain = [p for p in over if (p.model_extra or {}).get("price_of_realisability") is not None]
    complete = [
        p
        for p in at_plain
        if isinstance(s := (p.model_extra or {}).get("dispatch_search"), dict) and s.get("complete")
    ]
    prices = [float((p.model_extra or {})["price_of_realisability"]) for p in at_plain]
    return {
        "over_1pct": len(over),
        "bound_is_plain_optimum": sum(_bound_is_plain_optimum(p) for p in at_plain),
        "search_complete": len(complete),
        "price_of_realisability_median": statistics.median(prices) if prices else None,
        "quick_kept": sum("full_solve_error" in (p.model_extra or {}) for p in plans.values()),
    }


def _bound_is_plain_optimum(plan: Plan) -> bool:
    """Whether the plan's bound is the plain problem's cost (its proven optimum, not a looser bound)."""
    extra = plan.model_extra or {}
    bound, plain = extra.get("lower_bound_per_hour"), extra.get("plain_billed_per_hour")
    return bound is not None and plain is not None and abs(float(bound) - float(plain)) <= 1e-9


def one_seed(apps: int, seed: int, shape: str, budget_s: float | None, max_epochs: int) -> dict[str, Any]:
    """The cold epochs of one generated fleet (module doc)."""
    problems = fleet_problems(apps, seed, shape)
    solver = dispatch_solver(dataclasses.replace(ControlConfig(), solve_budget_s=budget_s))
    cache = RealisationCache()
    plans: dict[str, Plan] = {}
    fleet, carried = None, [""]
    epochs: list[dict[str, Any]] = []
    while carried and len(epochs) < max_epochs:
        cpu, wall = time.process_time(), time.perf_counter()
        res = plan_fleet(
            problems,
            previous=fleet,
            previous_plans=plans,
            solver=solver,
            cache=cache,
            solve_budget_s=budget_s,
        )
        epochs.append(
            {
                "cpu_ms": (time.process_time() - cpu) * 1000,
                "wall_ms": (time.perf_counter() - wall) * 1000,
                "quick": len(res.quick),
                "carried": len(res.carried),
                "resolved": len(res.resolved),
                "failed": len(res.failed),
                **_gaps(res.plans),
                "billed_per_hour": res.fleet.billed_per_hour,
            }
        )
        fleet, plans, carried = res.fleet, res.plans, res.carried
    cpu = time.process_time()
    full = plan_fleet(
        problems, solver=dispatch_solver(ControlConfig(solve_budget_s=None)), cache=RealisationCache()
    )
    return {
        "seed": seed,
        "epochs": epochs,
        "converged": not carried,
        "unbudgeted": {
            "cpu_ms": (time.process_time() - cpu) * 1000,
            "failed": len(full.failed),
            **_gaps(full.plans),
            "billed_per_hour": full.fleet.billed_per_hour,
        },
        "sources": _sources(plans),
    }


def run(apps: int, seeds: list[int], shape: str, budget_s: float | None, max_epochs: int) -> dict[str, Any]:
    load_start, started = os.getloadavg(), time.perf_counter()
    runs = [one_seed(apps, seed, shape, budget_s, max_epochs) for seed in seeds]
    return {
        "apps": apps,
        "shape": shape,
        "seeds": seeds,
        "budget_s": budget_s,
        "max_epochs": max_epochs,
        "runs": runs,
        "wall_s": time.perf_counter() - started,
        "host": {"cpus": os.cpu_count(), "load_avg_start": load_start, "load_avg_end": os.getloadavg()},
        "_raw": None,
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render(result: dict[str, Any]) -> None:
    console = Console(width=160)
    budget = "none" if result["budget_s"] is None else f"{result['budget_s']:g} s"
    for run_ in result["runs"]:
        table = Table(
            title=f"seed {run_['seed']}: {result['apps']} {result['shape']} apps with no plan, "
            f"solve budget {budget}"
        )
        for col in (
            "epoch",
            "cpu ms",
            "wall ms",
            "quick",
            "carried",
            "resolved",
            "failed",
            "with gap",
            "gap <= 1 %",
            "median gap",
            "max gap",
            "billed $/h",
        ):
            table.add_column(col, justify="right")
        rows = [(str(i), e) for i, e in enumerate(run_["epochs"])] + [("all at once", run_["unbudgeted"])]
        for name, e in rows:
            table.add_row(
                name,
                f"{e['cpu_ms']:.0f}",
                _fmt(e.get("wall_ms"), ".0f"),
                str(e.get("quick", "-")),
                str(e.get("carried", "-")),
                str(e.get("resolved", "-")),
                str(e["failed"]),
                str(e["with_gap"]),
                str(e["within_1pct"]),
                _fmt(e["median_gap"], ".2%"),
                _fmt(e["max_gap"], ".2%"),
                f"{e['billed_per_hour']:.1f}",
            )
        console.print(table)
        s = run_["sources"]
        console.print(
            f"after {len(run_['epochs'])} epoch(s) "
            f"({'none carried' if run_['converged'] else 'still carried'}): "
            f"{s['over_1pct']} apps over 1 %; of them {s['bound_is_plain_optimum']} against the proven plain "
            f"optimum (the gap is the price of realisability, median "
            f"{_fmt(s['price_of_realisability_median'], '.1%')}), the search over realised plans complete on "
            f"{s['search_complete']}; {s['quick_kept']} quick plan(s) kept after their full solve failed"
        )
    console.print(host_line(result))


def main(
    apps: int,
    seeds: list[int],
    shape: str,
    budget_s: float | None,
    max_epochs: int,
    as_json: bool,
    page: Recording | None = None,
) -> int:
    result = run(apps, seeds, shape, budget_s, max_epochs)
    emit(result, as_json, None, page, lambda _r, _p: None, render)
    return 0
