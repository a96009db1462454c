"""``skinflint bench planner --suite large``: the planner on application-sized problems (issue #29).

Generates seeded problems of 5-10 modules (:mod:`planner.generate_large`: chains, out-trees and DAGs with
joins), solves each with ``skinflint`` (and, for comparison, ``harpagon`` and ``piccolo``) for both
objectives, and the exhaustive reference (policy ``optimal``) under a CPU-time limit. Prints, per
objective and policy: plans valid (:func:`planner.check.check_plan`), timeouts, how many problems the
reference finished, the share at the reference's optimum and the worst ratio over it; for skinflint
also how many plans it proved optimal and the largest proven gap where it did not; then skinflint's solve
CPU time (its ``solve_cpu_ms``: process CPU inside :func:`planner.solve.solve`) by module count, median,
p95 and max. Writes a two-panel CDF plot (solve CPU time; cost over the reference). Nothing is hard-coded:
every figure is measured by the run, on this machine, with the load average printed beside it.
"""

from __future__ import annotations

import math
import os
import signal
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from bench.results import emit
from planner.check import check_plan
from planner.errors import InfeasibleError
from planner.generate_large import generate_large_problems
from planner.solve import solve

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from bench.results import Recording
    from planner.models import Objective, Plan, ProblemSpec

OBJECTIVES: tuple[Objective, ...] = ("occupancy", "billed")
POLICIES = ("skinflint", "harpagon", "piccolo")
AT_OPTIMUM = 1e-7  # relative: a plan within this of the reference is at the optimum


class _CpuLimit(Exception):
    """A solve ran past its CPU-time limit."""


def _on_limit(signum: int, frame: object) -> None:
    raise _CpuLimit


def _limited(limit_s: float, call: Callable[[], Plan]) -> Plan | None:
    """``call()`` under a CPU-time limit (ITIMER_PROF: this process's CPU); None past it."""
    previous = signal.signal(signal.SIGPROF, _on_limit)
    signal.setitimer(signal.ITIMER_PROF, limit_s)
    try:
        return call()
    except _CpuLimit:
        return None
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


@dataclass
class Outcome:
    """One policy on one problem and objective."""

    modules: int
    shape: str
    cost: float | None = None  # None: timed out or infeasible
    cpu_ms: float | None = None
    valid: bool = False
    timeout: bool = False
    infeasible: bool = False
    proven: bool = False
    gap: float | None = None  # the plan's proven gap (skinflint on 5+ modules)
    reference: float | None = None  # the reference's optimum, where it finished


@dataclass
class Suite:
    outcomes: dict[tuple[Objective, str], list[Outcome]] = field(default_factory=dict)
    reference_cpu_ms: dict[Objective, list[float]] = field(default_factory=dict)


def _cost(plan: Plan, objective: Objective) -> float:
    return plan.cost_per_hour if objective == "occupancy" else plan.billed_per_hour


def _solve(
    problem: ProblemSpec, policy: str, objective: Objective, limit_s: float
) -> tuple[Plan | None, bool]:
    """(plan or None, infeasible)."""
    try:
        return _limited(limit_s, lambda: solve(problem, policy, objective)), False
    except InfeasibleError:
        return None, True


def _shape(problem: ProblemSpec) -> str:
    """The DAG shape in a generated problem's name (``large-<shape>-<modules>-<seed>``)."""
    return problem.name.removeprefix("large-").rsplit("-", 2)[0]


def run_one(
    problem: ProblemSpec,
    objective: Objective,
    policies: tuple[str, ...],
    suite: Suite,
    limits: tuple[float, float],
) -> None:
    """Solve ``problem`` with the reference and every policy; append the outcomes."""
    reference_limit, limit = limits
    ref, _ = _solve(problem, "optimal", objective, reference_limit)
    best = _cost(ref, objective) if ref is not None else None
    if ref is not None:
        suite.reference_cpu_ms.setdefault(objective, []).append(
            float((ref.model_extra or {})["solve_cpu_ms"])
        )
    for policy in policies:
        out = Outcome(len(problem.modules), _shape(problem))
        plan, out.infeasible = _solve(problem, policy, objective, limit)
        out.timeout = plan is None and not out.infeasible
        if plan is not None:
            extra = plan.model_extra or {}
            out.cost = _cost(plan, objective)
            out.cpu_ms = float(extra["solve_cpu_ms"])
            out.valid = not check_plan(problem, plan, extra.get("latency_model", "tc"))
            out.proven = bool(extra.get("proven_optimal"))
            gap = extra.get("proven_gap")
            out.gap = float(gap) if gap is not None else None
            out.reference = best
        suite.outcomes.setdefault((objective, policy), []).append(out)


def _problems(count: int, seed: int) -> Iterator[ProblemSpec]:
    yield from generate_large_problems(count, seed)


def run(
    count: int, seed: int, reference_limit_s: float, limit_s: float, progress: bool = True
) -> dict[str, Any]:
    suite = Suite()
    started = time.perf_counter()
    load_start = os.getloadavg()
    problems = list(_problems(count, seed))
    with Progress(console=Console(stderr=True), disable=not progress, transient=True) as bar:
        task = bar.add_task("planning", total=len(problems) * len(OBJECTIVES))
        for problem in problems:
            for objective in OBJECTIVES:
                run_one(problem, objective, POLICIES, suite, (reference_limit_s, limit_s))
                bar.advance(task)
    return {
        "problems": count,
        "seed": seed,
        "reference_limit_s": reference_limit_s,
        "limit_s": limit_s,
        "wall_s": time.perf_counter() - started,
        "host": {"cpus": os.cpu_count(), "load_avg_start": load_start, "load_avg_end": os.getloadavg()},
        "results": {objective: _summaries(suite, objective) for objective in OBJECTIVES},
        "solve_cpu_ms_by_modules": {objective: _by_modules(suite, objective) for objective in OBJECTIVES},
        "reference_cpu_ms": {o: _percentiles(suite.reference_cpu_ms.get(o, [])) for o in OBJECTIVES},
        "_raw": {
            f"{objective}/{policy}": [
                {"modules": o.modules, "cost": o.cost, "reference": o.reference, "cpu_ms": o.cpu_ms}
                for o in suite.outcomes[(objective, policy)]
            ]
            for objective in OBJECTIVES
            for policy in POLICIES
        },
    }


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]) of a non-empty list."""
    xs = sorted(values)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


def _percentiles(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "median": None, "p95": None, "max": None}
    return {
        "n": len(values),
        "median": statistics.median(values),
        "p95": _percentile(values, 0.95),
        "max": max(values),
    }


def _summaries(suite: Suite, objective: Objective) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for policy in POLICIES:
        rows = suite.outcomes[(objective, policy)]
        planned = [o for o in rows if o.cost is not None]
        compared = [o for o in planned if o.reference is not None and o.valid]
        ratios = [o.cost / o.reference for o in compared if o.cost is not None and o.reference]
        gaps = [o.gap for o in planned if o.gap is not None and not o.proven]
        out[policy] = {
            "problems": len(rows),
            "planned": len(planned),
            "valid": sum(o.valid for o in planned),
            "timeouts": sum(o.timeout for o in rows),
            "infeasible": sum(o.infeasible for o in rows),
            "reference_finished": sum(o.reference is not None for o in planned),
            "at_optimum": sum(r <= 1 + AT_OPTIMUM for r in ratios),
            "at_optimum_pct": 100 * sum(r <= 1 + AT_OPTIMUM for r in ratios) / len(ratios)
            if ratios
            else None,
            "within_1pct_pct": 100 * sum(r <= 1.01 for r in ratios) / len(ratios) if ratios else None,
            "worst_ratio": max(ratios) if ratios else None,
            "below_reference": sum(r < 1 - 1e-7 for r in ratios),
            "proven_optimal": sum(o.proven for o in planned),
            "max_proven_gap": max(gaps) if gaps else (0.0 if planned else None),
            "cpu_ms": _percentiles([o.cpu_ms for o in planned if o.cpu_ms is not None]),
        }
    return out


def _by_modules(suite: Suite, objective: Objective) -> dict[str, dict[str, float | int | None]]:
    rows = [o for o in suite.outcomes[(objective, "skinflint")] if o.cpu_ms is not None]
    out = {
        str(n): _percentiles([o.cpu_ms for o in rows if o.modules == n and o.cpu_ms is not None])
        for n in sorted({o.modules for o in rows})
    }
    out["all"] = _percentiles([o.cpu_ms for o in rows if o.cpu_ms is not None])
    return out


def plot_cdf(result: dict[str, Any], path: str) -> None:
    import matplotlib  # optional and slow to import: only when a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display backend

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for objective in OBJECTIVES:
        xs = sorted(r["cpu_ms"] for r in result["_raw"][f"{objective}/skinflint"] if r["cpu_ms"] is not None)
        if xs:
            axes[0].step(
                xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=f"skinflint, {objective}"
            )
    axes[0].set_xscale("log")
    axes[0].axvline(20, color="grey", ls=":", lw=1)
    axes[0].axvline(500, color="grey", ls="--", lw=1)
    axes[0].set_xlabel("solve CPU time (ms, log; dotted 20 ms, dashed 500 ms)")
    axes[0].set_ylabel("CDF of problems")
    axes[0].set_title(f"solve time, {result['problems']} problems of 5-10 modules")
    axes[0].grid(alpha=0.3)
    axes[0].legend(loc="lower right", fontsize=8)
    for name, rows in result["_raw"].items():
        objective, policy = name.split("/")
        ratios = sorted(r["cost"] / r["reference"] for r in rows if r["cost"] is not None and r["reference"])
        if ratios:
            axes[1].step(
                ratios,
                [(i + 1) / len(ratios) for i in range(len(ratios))],
                where="post",
                label=f"{policy}, {objective}",
                lw=2 if policy == "skinflint" else 1.1,
            )
    axes[1].set_xlim(0.99, 2.0)
    axes[1].set_xlabel("cost / reference optimum (where the reference finished)")
    axes[1].set_title("cost over the exhaustive reference")
    axes[1].grid(alpha=0.3)
    axes[1].legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render(result: dict[str, Any]) -> None:
    console = Console(width=max(Console().width, 140))
    for objective in OBJECTIVES:
        table = Table(
            title=f"{objective}: {result['problems']} problems of 5-10 modules, "
            "against the reference where it finished"
        )
        for col in [
            "policy",
            "planned",
            "no plan",
            "valid",
            "timeouts",
            "ref done",
            "at opt",
            "at opt %",
            "<=1% %",
            "worst",
            "proven opt",
            "max gap",
            "cpu med ms",
            "cpu p95 ms",
            "cpu max ms",
        ]:
            table.add_column(col, justify="left" if col == "policy" else "right")
        for policy, row in result["results"][objective].items():
            cpu = row["cpu_ms"]
            table.add_row(
                policy,
                str(row["planned"]),
                str(row["infeasible"]),
                str(row["valid"]),
                str(row["timeouts"]),
                str(row["reference_finished"]),
                str(row["at_optimum"]),
                _fmt(row["at_optimum_pct"], ".1f"),
                _fmt(row["within_1pct_pct"], ".1f"),
                _fmt(row["worst_ratio"], ".4f"),
                str(row["proven_optimal"]) if policy == "skinflint" else "-",
                _fmt(row["max_proven_gap"], ".2%") if policy == "skinflint" else "-",
                _fmt(cpu["median"], ".1f"),
                _fmt(cpu["p95"], ".1f"),
                _fmt(cpu["max"], ".1f"),
            )
        console.print(table)
    table = Table(title="skinflint solve CPU time (ms) by module count: median / p95 / max")
    table.add_column("modules")
    for objective in OBJECTIVES:
        table.add_column(f"{objective} n", justify="right")
        table.add_column(objective, justify="right")
    keys = list(result["solve_cpu_ms_by_modules"][OBJECTIVES[0]])
    for key in keys:
        cells = [key]
        for objective in OBJECTIVES:
            p = result["solve_cpu_ms_by_modules"][objective].get(key, {"n": 0})
            cells += [
                str(p["n"]),
                f"{_fmt(p.get('median'), '.1f')} / {_fmt(p.get('p95'), '.1f')} / {_fmt(p.get('max'), '.1f')}",
            ]
        table.add_row(*cells)
    console.print(table)
    ref = result["reference_cpu_ms"]
    console.print(
        "reference (policy optimal) CPU ms where it finished: "
        + "; ".join(
            f"{o} n={ref[o]['n']} median {_fmt(ref[o]['median'], '.0f')} max {_fmt(ref[o]['max'], '.0f')}"
            for o in OBJECTIVES
        )
    )
    host = result["host"]
    load = (
        ", ".join(f"{x:.1f}" for x in host["load_avg_start"])
        + " -> "
        + ", ".join(f"{x:.1f}" for x in host["load_avg_end"])
    )
    console.print(
        f"{result['problems']} problems, seed {result['seed']}, "
        f"reference CPU limit {result['reference_limit_s']:g} s, policy CPU limit {result['limit_s']:g} s, "
        f"{result['wall_s']:.0f} s wall, {host['cpus']} CPUs, load avg {load}"
    )


def main(
    count: int,
    seed: int,
    reference_limit_s: float,
    limit_s: float,
    as_json: bool,
    plot: str | None,
    page: Recording | None = None,
) -> int:
    result = run(count, seed, reference_limit_s, limit_s, progress=not as_json)
    emit(result, as_json, plot, page, plot_cdf, render)
    return 0
