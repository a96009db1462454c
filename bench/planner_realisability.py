"""``skinflint bench planner --suite realisability``: what the plain plan would serve, what a plan the
time-window dispatch can run costs, and where the gap the control loop reports comes from (issue #29).

For each generated problem (``large``: :mod:`planner.generate_large`, 5-10 modules, the default;
``small``: :mod:`planner.generate`, 1-4) planned as the control loop plans it, for its rates times
``1 + headroom`` (:class:`control.config.ControlConfig`'s forecast headroom):

- the **plain** plan: :func:`planner.solve.solve`, billed, exact under Theorem 1 (each module's worst
  case ``d + b / w`` taken on its own), whose cost is the certified lower bound the control loop's
  ``proven_gap`` is measured against;
- the **realised** plan: :func:`planner.robust.solve_dispatchable` with the control loop's settings, each
  module's worst case what the dispatch realises (schedule bound, bursts of children, spread rates;
  docs/dispatch.md), or none when it finds no plan within the SLO.

Both are simulated (:func:`planner.simulator.simulate`) at the problem's own rates for ``duration``
seconds: uniform frames with no admission (the model's own arrivals), and Poisson frames behind the
front's admission as deployed (``admission="planned"``). Per plan: its bill, the share of frames answered
within the SLO, and whether a window ever held more than its batch (``overflow``). Per problem: the
price of realisability (realised / plain - 1) and whether the realised plan's branch and bound over
realised plans finished (``dispatch_search.complete``). Nothing is hard-coded: every figure is measured
by the run, on this machine.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import track
from rich.table import Table

from bench.problems import scaled
from bench.results import emit, host_line
from control.config import ControlConfig
from planner.errors import InfeasibleError
from planner.generate import generate_problems
from planner.generate_large import generate_large_problems
from planner.robust import solve_dispatchable
from planner.simulator import simulate
from planner.solve import solve

if TYPE_CHECKING:
    from bench.results import Recording
    from planner.models import Plan, ProblemSpec

SHAPES = ("small", "large")
WITHIN = 0.99  # a plan "serves" its app when at least this share of the frames is within the SLO
#: (label, arrivals, admission) of the simulated runs
RUNS = (("uniform", "uniform", "none"), ("poisson", "poisson", "planned"))


def problems(count: int, seed: int, shape: str) -> list[ProblemSpec]:
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}, got {shape!r}")
    return (generate_problems if shape == "small" else generate_large_problems)(count, seed)


def _served(problem: ProblemSpec, plan: Plan, duration: float, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {"billed_per_hour": plan.billed_per_hour}
    for label, arrivals, admission in RUNS:
        report = simulate(problem, plan, duration, arrivals, seed=seed, admission=admission)  # type: ignore[arg-type]
        offered = report.frames_offered
        out[label] = {
            "within_slo": report.end_to_end.slo_attainment,
            "shed": report.frames_shed / offered if offered else 0.0,
            "overflow": any(m.overflow_batches for m in report.modules.values()),
        }
    return out


def one_problem(problem: ProblemSpec, index: int, config: ControlConfig, duration: float) -> dict[str, Any]:
    """The plain and the realised plan of one problem, each simulated (module doc)."""
    planned_for = scaled(problem, 1 + config.headroom)
    row: dict[str, Any] = {"problem": problem.name, "modules": len(problem.modules)}
    plain = solve(planned_for, policy=config.policy, objective="billed")
    row["plain"] = _served(problem, plain, duration, index)
    cpu = time.process_time()
    try:
        realised = solve_dispatchable(
            planned_for, policy=config.policy, objective="billed", child_headroom=config.child_headroom
        )
    except InfeasibleError as err:
        row["realised"] = None
        row["no_plan"] = str(err)
        row["realised_cpu_s"] = time.process_time() - cpu
        return row
    row["realised_cpu_s"] = time.process_time() - cpu
    row["realised"] = _served(problem, realised, duration, index)
    extra = realised.model_extra or {}
    row["price_of_realisability"] = extra.get("price_of_realisability")
    search = extra.get("dispatch_search")
    row["search_complete"] = bool(isinstance(search, dict) and search.get("complete"))
    return row


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    realisable = [r for r in rows if r["realised"] is not None]
    prices = [r["price_of_realisability"] for r in realisable if r["price_of_realisability"] is not None]
    out: dict[str, Any] = {
        "problems": len(rows),
        "realisable": len(realisable),
        "plain_billed_per_hour": sum(r["plain"]["billed_per_hour"] for r in realisable),
        "realised_billed_per_hour": sum(r["realised"]["billed_per_hour"] for r in realisable),
        "price_median": statistics.median(prices) if prices else None,
        "price_max": max(prices) if prices else None,
        "within_1pct": sum(p <= 0.01 + 1e-12 for p in prices),
        "search_complete": sum(r["search_complete"] for r in realisable),
    }
    for plan in ("plain", "realised"):
        served = [r[plan] for r in (rows if plan == "plain" else realisable)]
        for label, _, _ in RUNS:
            within = [s[label]["within_slo"] for s in served]
            out[f"{plan}_{label}"] = {
                "serving": sum(w >= WITHIN for w in within),
                "within_slo_median": statistics.median(within) if within else None,
                "within_slo_min": min(within) if within else None,
                "overflowing": sum(s[label]["overflow"] for s in served),
                "shed_mean": statistics.fmean(s[label]["shed"] for s in served) if served else None,
            }
    return out


def run(count: int, seed: int, shape: str, duration: float) -> dict[str, Any]:
    config = ControlConfig()
    load_start, started = os.getloadavg(), time.perf_counter()
    rows = [
        one_problem(problem, seed + i, config, duration)
        for i, problem in enumerate(
            track(
                problems(count, seed, shape),
                description="planning and simulating",
                console=Console(stderr=True),
                transient=True,
            )
        )
    ]
    by_modules = {
        n: _summary([r for r in rows if r["modules"] == n]) for n in sorted({r["modules"] for r in rows})
    }
    return {
        "problems": count,
        "seed": seed,
        "shape": shape,
        "simulated_s": duration,
        "headroom": config.headroom,
        "within": WITHIN,
        "all": _summary(rows),
        "by_modules": by_modules,
        "rows": rows,
        "wall_s": time.perf_counter() - started,
        "host": {"cpus": os.cpu_count(), "load_avg_start": load_start, "load_avg_end": os.getloadavg()},
        "_raw": None,
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def render(result: dict[str, Any]) -> None:
    console = Console(width=160)
    table = Table(
        title=f"{result['problems']} {result['shape']} problems (seed {result['seed']}), planned for their "
        f"rates + {result['headroom']:.0%}, simulated {result['simulated_s']:g} s at their rates"
    )
    for col in (
        "modules",
        "problems",
        "realisable",
        "plain $/h",
        "realised $/h",
        "price median",
        "price max",
        "search done",
        "plain serves",
        "plain in SLO",
        "realised serves u/P",
        "realised overflow u/P",
    ):
        table.add_column(col, justify="right")
    rows = [(str(n), s) for n, s in result["by_modules"].items()] + [("all", result["all"])]
    for name, s in rows:
        table.add_row(
            name,
            str(s["problems"]),
            str(s["realisable"]),
            f"{s['plain_billed_per_hour']:.1f}",
            f"{s['realised_billed_per_hour']:.1f}",
            _pct(s["price_median"]),
            _pct(s["price_max"]),
            str(s["search_complete"]),
            f"{s['plain_uniform']['serving']}/{s['problems']}",
            _pct(s["plain_uniform"]["within_slo_median"]),
            f"{s['realised_uniform']['serving']}/{s['realised_poisson']['serving']} of {s['realisable']}",
            f"{s['realised_uniform']['overflowing']}/{s['realised_poisson']['overflowing']}",
        )
    console.print(table)
    console.print(
        "bills: the EC2 fleet only, at the generator's catalog prices (planner/generate.py, "
        "planner/generate_large.py: the on-demand prices of profiles/hardware.json, AWS EC2, Linux, "
        "us-east-1, 2024-06; p100 a GCP reference figure); generated problems have no data plane, so "
        "these are not all-in costs"
    )
    a = result["all"]
    plain = a["plain_uniform"]
    console.print(
        "plain plans (whose bill bounds the control loop's gap): "
        f"{plain['serving']} of {a['problems']} serve >= {result['within']:.0%} of uniform frames within the "
        f"SLO (median {_pct(plain['within_slo_median'])}, min {_pct(plain['within_slo_min'])}), "
        f"{plain['overflowing']} overflow a window; Poisson behind the admission: "
        f"{a['plain_poisson']['serving']} serve, {_pct(a['plain_poisson']['shed_mean'])} shed on average"
    )
    console.print(
        f"realised plans: {a['realised_uniform']['serving']} and {a['realised_poisson']['serving']} of "
        f"{a['realisable']} serve (uniform; Poisson behind the admission, "
        f"{_pct(a['realised_poisson']['shed_mean'])} shed on average); price of realisability within 1 % "
        f"on {a['within_1pct']}; no realisable plan found for {a['problems'] - a['realisable']}"
    )
    console.print(host_line(result))


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib  # optional and slow to import: only when a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display backend

    rows = result["rows"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for plan, style in (("plain", "C3"), ("realised", "C0")):
        for label, dash in (("uniform", "-"), ("poisson", "--")):
            xs = sorted(r[plan][label]["within_slo"] for r in rows if r[plan] is not None)
            if xs:
                ys = [(i + 1) / len(xs) for i in range(len(xs))]
                left.step(xs, ys, dash, color=style, where="post", label=f"{plan}, {label}")
    left.set_xlabel("frames within the SLO (simulated)")
    left.set_ylabel("share of problems")
    left.set_title("does the plan serve its app?")
    left.legend(loc="upper left", fontsize=8)
    prices = sorted(r["price_of_realisability"] for r in rows if r.get("price_of_realisability") is not None)
    if prices:
        right.step([1 + p for p in prices], [(i + 1) / len(prices) for i in range(len(prices))], where="post")
        right.set_xscale("log")
    right.set_xlabel("realised plan's bill / plain plan's bill (log)")
    right.set_ylabel("share of realisable problems")
    right.set_title("price of realisability")
    fig.suptitle(f"{result['problems']} {result['shape']} problems, seed {result['seed']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(
    count: int,
    seed: int,
    shape: str,
    duration: float,
    as_json: bool,
    plot_path: str | None,
    page: Recording | None = None,
) -> int:
    result = run(count, seed, shape, duration)
    emit(result, as_json, plot_path, page, plot, render)
    return 0
