"""Planner benchmark: every policy on seeded generated problems, normalised to the exact optimum.

Prints, per objective and policy: plans valid, plans found, mean / max cost over the exhaustive
reference (policy ``optimal``), share of problems at the optimum, median / p95 in-process solve
time; writes a CDF plot of normalised cost (like Harpagon Fig. 5b). Figures are measured on this
machine at run time; nothing is hard-coded. ``skinflint bench planner``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from bench.results import Recording, add_results_arguments, emit, record
from control.config import ControlConfig
from planner.check import check_plan
from planner.errors import InfeasibleError
from planner.generate import generate_problems
from planner.policies import BASELINES
from planner.solve import solve

if TYPE_CHECKING:
    from planner.models import Objective, Plan, ProblemSpec

DEFAULT_POLICIES = ["skinflint", "harpagon", "piccolo", *BASELINES]
ABLATIONS = [
    "harp-2d", "harp-dt", "harp-1c", "harp-2c", "harp-nb", "harp-nhc", "harp-nhe",
    "harp-nd", "harp-0re", "harp-1re", "harp-tb", "harp-q0.01", "harp-q0.1",
]  # fmt: skip
OBJECTIVES: tuple[Objective, ...] = ("occupancy", "billed")


@dataclass
class Row:
    costs: list[float] = field(default_factory=list)  # normalised to the optimum
    times_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    invalid: int = 0
    infeasible: int = 0

    def summary(self, problems: int) -> dict[str, Any]:
        costs, times, cpu = self.costs, sorted(self.times_ms), sorted(self.cpu_ms)
        return {
            "problems": problems,
            "planned": len(costs),
            "infeasible": self.infeasible,
            "invalid": self.invalid,
            "mean_norm_cost": statistics.fmean(costs) if costs else None,
            "max_norm_cost": max(costs) if costs else None,
            "at_optimum_pct": 100 * sum(cost <= 1 + 1e-7 for cost in costs) / len(costs) if costs else None,
            "within_1pct_pct": 100 * sum(cost <= 1.01 for cost in costs) / len(costs) if costs else None,
            "median_ms": statistics.median(times) if times else None,
            "p95_ms": times[min(len(times) - 1, int(0.95 * len(times)))] if times else None,
            "median_cpu_ms": statistics.median(cpu) if cpu else None,
            "p95_cpu_ms": cpu[min(len(cpu) - 1, int(0.95 * len(cpu)))] if cpu else None,
        }


def run(count: int, seed: int, policies: list[str], progress: bool = True) -> dict[str, Any]:
    problems = generate_problems(count, seed)
    rows = {(objective, policy): Row() for objective in OBJECTIVES for policy in [*policies, "optimal"]}
    started = time.perf_counter()
    # the bar goes to stderr: stdout holds the figures (and the results page copies it)
    with Progress(console=Console(stderr=True), disable=not progress, transient=True) as bar:
        task = bar.add_task("planning", total=len(problems) * len(OBJECTIVES))
        for problem in problems:
            for objective in OBJECTIVES:
                _one(problem, objective, policies, rows)
                bar.advance(task)
    return {
        "problems": count,
        "seed": seed,
        "wall_s": time.perf_counter() - started,
        "host": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "results": {
            objective: {policy: rows[(objective, policy)].summary(count) for policy in [*policies, "optimal"]}
            for objective in OBJECTIVES
        },
        "_raw": {
            f"{objective}/{policy}": rows[(objective, policy)].costs
            for objective in OBJECTIVES
            for policy in policies
        },
    }


def _extra(plan: Plan) -> dict[str, Any]:
    """The solver's figures beyond the schema (``solve_cpu_ms``, ``latency_model``): a plan allows
    extra fields, so pydantic always keeps them in a dict."""
    if plan.model_extra is None:
        raise TypeError("a Plan keeps its extra fields (model_config extra='allow')")
    return plan.model_extra


def _one(
    problem: ProblemSpec, objective: Objective, policies: list[str], rows: dict[tuple[Objective, str], Row]
) -> None:
    key = "cost_per_hour" if objective == "occupancy" else "billed_per_hour"
    ref = solve(problem, "optimal", objective)
    rows[(objective, "optimal")].times_ms.append(ref.solve_ms)
    rows[(objective, "optimal")].cpu_ms.append(_extra(ref)["solve_cpu_ms"])
    rows[(objective, "optimal")].costs.append(1.0)
    best = getattr(ref, key)
    for policy in policies:
        row = rows[(objective, policy)]
        try:
            plan = solve(problem, policy, objective)
        except InfeasibleError:
            row.infeasible += 1
            continue
        row.times_ms.append(plan.solve_ms)
        row.cpu_ms.append(_extra(plan)["solve_cpu_ms"])
        if check_plan(problem, plan, _extra(plan)["latency_model"]):
            row.invalid += 1
        row.costs.append(getattr(plan, key) / best)


def plot_cdf(result: dict[str, Any], path: str) -> None:
    import matplotlib  # optional and slow to import: only when a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display backend

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, objective in zip(axes, OBJECTIVES, strict=True):
        for name, costs in result["_raw"].items():
            objective_name, policy = name.split("/")
            if objective_name != objective or not costs or policy not in DEFAULT_POLICIES:
                continue
            xs = sorted(costs)
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.step(xs, ys, where="post", label=policy, lw=2 if policy == "skinflint" else 1.2)
        ax.set_title(f"{objective} cost / exact optimum ({result['problems']} problems)")
        ax.set_xlabel("normalised cost")
        ax.set_xlim(0.98, 4.0)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("CDF of problems")
    axes[1].legend(loc="lower right", fontsize=8, title="policy (ablations: see table)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render(result: dict[str, Any]) -> None:
    console = Console(width=max(Console().width, 130))
    for objective in OBJECTIVES:
        table = Table(title=f"{objective} objective: cost normalised to the exact optimum")
        for col in [
            "policy",
            "planned",
            "infeasible",
            "invalid",
            "mean",
            "max",
            "at opt %",
            "<=1% %",
            "median ms",
            "p95 ms",
            "cpu med ms",
            "cpu p95 ms",
        ]:
            table.add_column(col, justify="right" if col != "policy" else "left")
        for policy, row in result["results"][objective].items():
            table.add_row(
                policy,
                str(row["planned"]),
                str(row["infeasible"]),
                str(row["invalid"]),
                _fmt(row["mean_norm_cost"], ".3f"),
                _fmt(row["max_norm_cost"], ".3f"),
                _fmt(row["at_optimum_pct"], ".1f"),
                _fmt(row["within_1pct_pct"], ".1f"),
                _fmt(row["median_ms"], ".2f"),
                _fmt(row["p95_ms"], ".2f"),
                _fmt(row["median_cpu_ms"], ".2f"),
                _fmt(row["p95_cpu_ms"], ".2f"),
            )
        console.print(table)
    load = ", ".join(f"{load:.1f}" for load in result["host"]["load_avg"])
    problems, seed, wall = result["problems"], result["seed"], result["wall_s"]
    console.print(f"{problems} problems, seed {seed}, {wall:.0f} s wall, load avg {load}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run every policy on seeded generated problems shaped like the papers' apps and random DAGs; print "
        "cost normalised to the exhaustive optimum and solve times."
    )
    parser.add_argument(
        "--suite",
        choices=["small", "large", "epoch", "realisability"],
        default="small",
        help="small: 1-4-module problems, every policy (default); large: 5-10-module DAGs with joins, "
        "skinflint, harpagon and piccolo against the reference (bench/planner_large.py); epoch: cold "
        "epochs of a generated fleet with the control loop's solver and solve budget, each app's proven "
        "gap (bench/planner_epoch.py); realisability: each problem's plain and dispatch-realised plans, "
        "simulated, and the price of realisability (bench/planner_realisability.py)",
    )
    parser.add_argument(
        "--problems",
        type=int,
        default=None,
        help="number of problems (default 300 small, 120 large, 48 realisability; epoch: apps per "
        "fleet, 100)",
    )
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    parser.add_argument("--ablations", action="store_true", help="also run Harpagon's §IV-C ablations")
    parser.add_argument(
        "--plot",
        default=None,
        help="plot path (default planner_cdf.png small, planner_large_cdf.png large, "
        "planner_realisability.png realisability; '' for none)",
    )
    parser.add_argument(
        "--reference-limit",
        type=float,
        default=20.0,
        metavar="S",
        help="large suite: CPU seconds the exhaustive reference may take per solve (default 20)",
    )
    parser.add_argument(
        "--limit",
        type=float,
        default=60.0,
        metavar="S",
        help="large suite: CPU seconds a policy may take per solve (past it: a timeout; default 60)",
    )
    parser.add_argument(
        "--apps",
        choices=["small", "large"],
        default=None,
        help="epoch and realisability suites: the apps, 1-4 modules (small, as bench fleet; the epoch "
        "suite's default) or 5-10 (large; the realisability suite's default)",
    )
    parser.add_argument(
        "--duration",
        type=_seconds,
        default=4.0,
        metavar="S",
        help="realisability suite: simulated seconds per plan and arrival process (default 4)",
    )
    parser.add_argument(
        "--seeds", type=int, default=3, help="epoch suite: fleets of seeds SEED..SEED+N-1 (default 3)"
    )
    parser.add_argument(
        "--budget",
        type=_budget,
        default=ControlConfig().solve_budget_s,
        metavar="S",
        help="epoch suite: the epoch's solve budget, CPU s or 'none' (default the control loop's, "
        f"{ControlConfig().solve_budget_s:g})",
    )
    parser.add_argument(
        "--max-epochs", type=int, default=12, help="epoch suite: epochs at most per fleet (default 12)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    add_results_arguments(parser)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"a duration is finite seconds > 0, got {text!r}")
    return value


def _budget(text: str) -> float | None:
    if text.lower() == "none":
        return None
    value = float(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"a budget is finite seconds >= 0 or 'none', got {text!r}")
    return value


def run_command(args: argparse.Namespace) -> int:
    if args.suite == "realisability":
        from bench import planner_realisability  # noqa: PLC0415 - the suite's own module

        return record(
            "planner-realisability",
            args,
            lambda page: planner_realisability.main(
                args.problems or 48,
                args.seed,
                args.apps or "large",
                args.duration,
                args.json,
                "planner_realisability.png" if args.plot is None else args.plot or None,
                page,
            ),
        )
    if args.suite == "epoch":
        from bench import planner_epoch  # noqa: PLC0415 - the epoch suite's own module

        seeds = list(range(args.seed, args.seed + args.seeds))
        return record(
            "planner-epoch",
            args,
            lambda page: planner_epoch.main(
                args.problems or 100,
                seeds,
                args.apps or "small",
                args.budget,
                args.max_epochs,
                args.json,
                page,
            ),
        )
    if args.suite == "large":
        from bench import planner_large  # the large suite's own module (its generator, its reference)

        return record(
            "planner-large",
            args,
            lambda page: planner_large.main(
                args.problems or 120,
                args.seed,
                args.reference_limit,
                args.limit,
                args.json,
                "planner_large_cdf.png" if args.plot is None else args.plot,
                page,
            ),
        )
    return record(
        "planner",
        args,
        lambda page: main(
            args.problems or 300,
            args.seed,
            args.ablations,
            args.json,
            "planner_cdf.png" if args.plot is None else args.plot,
            page,
        ),
    )


def main(
    count: int, seed: int, ablations: bool, as_json: bool, plot: str | None, page: Recording | None = None
) -> int:
    policies = DEFAULT_POLICIES + (ABLATIONS if ablations else [])
    result = run(count, seed, policies, progress=not as_json)
    emit(result, as_json, plot, page, plot_cdf, render)
    return 0
