"""The simulator benchmark's check: a plan's dispatch schedules built and simulated (measured against
planned, Theorem 1 beside it), and dispatch-aware solves of generated problems simulated in turn."""

from __future__ import annotations

import random
import statistics
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from planner.dispatch import DispatchSchedule, build_schedules
from planner.errors import InfeasibleError
from planner.generate import generate_problem
from planner.robust import solve_dispatchable
from planner.simulator import SimulationReport, simulate

if TYPE_CHECKING:
    from planner.models import Plan, ProblemSpec

__all__ = ["generated", "print_generated", "print_runs", "run"]


def _rows(report: SimulationReport, plan: Plan) -> list[dict[str, object]]:
    return [
        {
            "module": module,
            "requests": stats.requests,
            "p99_s": round(stats.latency.p99_s, 4),
            "measured_max_s": round(stats.measured_worst_case_s, 4),
            "schedule_bound_s": round(stats.schedule_worst_case_s, 4),
            "theorem1_s": round(stats.theorem1_s, 4),
            "planned_s": round(stats.planned_worst_case_s, 4),
            "machines": sum(group.machines for group in plan.modules[module].groups),
            "headroom": round(float((plan.modules[module].model_extra or {}).get("headroom_used", 0.0)), 3),
            "within_plan": stats.within_plan,
            "overflow": stats.overflow_batches,
            "mean_fill": round(stats.mean_fill, 3),
        }
        for module, stats in report.modules.items()
    ]


def _slot_at_p99_us(schedule: DispatchSchedule, horizon: float, calls: int = 10_000) -> float:
    """p99 of one in-process ``slot_at`` call over random times (microseconds)."""
    rng = random.Random(0)
    times = []
    for _ in range(calls):
        at = rng.uniform(0.0, horizon)
        t0 = time.perf_counter_ns()
        schedule.slot_at(at)
        times.append(time.perf_counter_ns() - t0)
    times.sort()
    return round(times[int(0.99 * calls)] / 1000, 1)


def run(problem: ProblemSpec, plan: Plan, duration: float, arrivals: str, dispatch: str) -> dict[str, object]:
    t0 = time.perf_counter()
    schedules = build_schedules(plan, {name: hw.price_per_hour for name, hw in problem.hardware.items()})
    t_sched = time.perf_counter() - t0
    slot_at_p99_us = {module: _slot_at_p99_us(schedule, duration) for module, schedule in schedules.items()}
    t0 = time.perf_counter()
    report = simulate(problem, plan, duration, arrivals=arrivals, dispatch=dispatch)  # type: ignore[arg-type]
    wall = time.perf_counter() - t0
    return {
        "problem": problem.name,
        "dispatch": dispatch,
        "arrivals": arrivals,
        "simulated_s": duration,
        "machines": sum(group.machines for mp in plan.modules.values() for group in mp.groups),
        "windows_per_period": {module: len(schedule.windows) for module, schedule in schedules.items()},
        "schedule_build_s": round(t_sched, 3),
        "slot_at_p99_us": slot_at_p99_us,
        "wall_s": round(wall, 2),
        "requests": report.requests,
        "requests_per_wall_s": round(report.requests / wall),
        "slo_s": problem.slo_s,
        "slo_attainment": report.end_to_end.slo_attainment,
        "e2e_max_s": round(report.end_to_end.latency.max_s, 4),
        "e2e_planned_s": round(report.end_to_end.planned_worst_case_s, 4),
        "all_within_plan": report.all_within_plan,
        "modules": _rows(report, plan),
    }


def print_runs(results: list[dict[str, object]]) -> None:
    console = Console(width=None if Console().is_terminal else 160)
    for result in results:
        console.print(
            f"[bold]{result['problem']}[/] dispatch={result['dispatch']} arrivals={result['arrivals']} "
            f"simulated={result['simulated_s']}s machines={result['machines']} wall={result['wall_s']}s "
            f"requests={result['requests']:,} ({result['requests_per_wall_s']:,}/s wall) "
            f"SLO {result['slo_s']}s attained {result['slo_attainment']:.4%} e2e max {result['e2e_max_s']}s "
            f"(planned {result['e2e_planned_s']}s) schedule build {result['schedule_build_s']}s "
            f"slot_at p99 {result['slot_at_p99_us']} us"
        )
        rows = result["modules"]
        assert isinstance(rows, list)
        table = Table(*rows[0].keys())
        for row in rows:
            table.add_row(*(str(value) for value in row.values()))
        console.print(table)


def generated(count: int, duration: float, seed: int = 0) -> dict[str, object]:
    """Dispatch-aware solves of ``count`` generated problems per objective, each plan simulated under
    uniform arrivals: how many modules stay within their realised figure, overflows, the same for the
    joins (modules with several parents, and the plans that have one), the price of realisability
    (cost against the plain Theorem-1 optimum) and the solve time."""
    out: dict[str, object] = {"problems": count, "simulated_s": duration}
    for objective in ("billed", "occupancy"):
        price: list[float] = []
        join_price: list[float] = []
        solve_ms: list[float] = []
        keys = ("plans", "infeasible", "modules", "within", "overflow", "join_plans", "joins", "joins_within")
        tally = dict.fromkeys(keys, 0)
        tally["joins_overflow"] = 0
        e2e_ok = 0
        for i in range(count):
            problem = generate_problem(seed + i)
            try:
                plan = solve_dispatchable(problem, objective=objective)
            except InfeasibleError:
                tally["infeasible"] += 1
                continue
            report = simulate(problem, plan, duration)
            joins = {module for module, ps in problem.parents().items() if len(ps) > 1}
            tally["plans"] += 1
            tally["join_plans"] += bool(joins)
            realisability = (plan.model_extra or {}).get("price_of_realisability")
            if realisability is not None:  # None: no plain plan to compare with
                price.append(float(realisability))
                if joins:
                    join_price.append(float(realisability))
            solve_ms.append(plan.solve_ms)
            for name, stats in report.modules.items():
                within = stats.measured_worst_case_s <= plan.modules[name].worst_case_latency_s + 1e-9
                tally["modules"] += 1
                tally["within"] += within
                tally["overflow"] += stats.overflow_batches > 0
                if name in joins:
                    tally["joins"] += 1
                    tally["joins_within"] += within
                    tally["joins_overflow"] += stats.overflow_batches > 0
            e2e_ok += report.end_to_end.latency.max_s <= problem.slo_s + 1e-9
        out[objective] = {
            **tally,
            "e2e_within_slo": e2e_ok,
            "price_mean": round(statistics.fmean(price), 4) if price else 0.0,
            "price_max": round(max(price), 4) if price else 0.0,
            "price_nonzero": sum(1 for ratio in price if ratio > 1e-9),
            "join_price_mean": round(statistics.fmean(join_price), 4) if join_price else 0.0,
            "join_price_max": round(max(join_price), 4) if join_price else 0.0,
            "solve_ms_median": round(statistics.median(solve_ms), 1) if solve_ms else 0.0,
            "solve_ms_p95": round(sorted(solve_ms)[int(0.95 * (len(solve_ms) - 1))], 1) if solve_ms else 0.0,
        }
    return out


def print_generated(study: dict[str, object]) -> None:
    table = Table(
        title=f"dispatch-aware solves of {study['problems']} generated problems, "
        f"{study['simulated_s']} s each"
    )
    keys = [key for key, value in study.items() if isinstance(value, dict)]
    table.add_column("figure")
    for objective in keys:
        table.add_column(objective)
    first = study[keys[0]]
    assert isinstance(first, dict)
    for field in first:
        table.add_row(field, *(str(study[objective][field]) for objective in keys))  # type: ignore[index]
    Console(width=None if Console().is_terminal else 160).print(table)
