"""`skinflint bench fleet`: every part of the fleet benchmark in turn (:func:`run`), printed or as JSON."""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import Progress

from bench.errors import OptionError
from bench.fleet.common import SOLVERS, TARGET_EPOCH_S, TARGET_RATIO, solver_for
from bench.fleet.cost import by_size, one_fleet
from bench.fleet.report import plot, render
from bench.fleet.steady import steady, steady_run, verify
from bench.fleet.timing import epoch_times
from bench.options import positive_int
from bench.results import Recording, add_results_arguments, record
from planner.generate import generate_problems

if TYPE_CHECKING:
    import argparse


def run(
    apps: int,
    seed: int,
    seeds: int,
    sizes: list[int],
    epochs: int,
    noise: float,
    progress: bool = True,
    solver: str = "dispatchable",
    steady_runs: int = 4,
) -> dict[str, Any]:
    if steady_runs < 1:
        raise ValueError(f"steady_runs must be >= 1, got {steady_runs}")
    started = time.perf_counter()
    sizes = sorted(set(sizes) | {apps})
    fleets: list[dict[str, Any]] = []
    # the bar goes to stderr: stdout holds the figures (and the results page copies it)
    with Progress(console=Console(stderr=True), disable=not progress, transient=True) as bar:
        task = bar.add_task("fleets", total=len(sizes) * seeds + 1 + steady_runs + len(SOLVERS))
        for size in sizes:
            for repeat in range(seeds):
                problems = {
                    f"app{i}": problem
                    for i, problem in enumerate(generate_problems(size, seed * 1000 + repeat))
                }
                row = one_fleet(problems, solver)
                row.update(size=size, seed=seed * 1000 + repeat)
                fleets.append(row)
                bar.advance(task)
        main = next(fleet_row for fleet_row in fleets if fleet_row["size"] == apps)
        timing = []
        for name in SOLVERS:
            timing.append(epoch_times(main["_problems"], 3, name))
            bar.advance(task)
        check = verify(main["_fleet"], main["_problems"])
        bar.advance(task)
        steady_apps = {app: main["_problems"][app] for app in sorted(main["_problems"])[: min(apps, 40)]}
        load = steady(steady_apps, epochs, noise, seed, solver)
        runs = [steady_run(0, load, apps, seed)]
        bar.advance(task)
        for i in range(1, steady_runs):
            fleet = {
                f"app{index}": problem
                for index, problem in enumerate(generate_problems(apps, seed * 1000 + i))
            }
            first = {app: fleet[app] for app in sorted(fleet)[: min(apps, 40)]}
            runs.append(steady_run(i, steady(first, epochs, noise, seed + i, solver), apps, seed))
            bar.advance(task)
    for fleet_row in fleets:
        fleet_row.pop("_fleet")
        fleet_row.pop("_problems")
    return {
        "apps": apps,
        "solver": solver,
        "seed": seed,
        "seeds": seeds,
        "fleets": fleets,
        "by_size": by_size(fleets),
        "timing": timing,
        "verification": check,
        "steady": load,
        "steady_runs": runs,
        "targets": {"ratio": TARGET_RATIO, "epoch_s": TARGET_EPOCH_S, "changes_per_2_epochs": 1},
        "wall_s": time.perf_counter() - started,
        "host": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
    }


def main(
    apps: int,
    seed: int,
    as_json: bool,
    plot_path: str | None,
    *,
    seeds: int = 5,
    sizes: list[int] | None = None,
    epochs: int = 24,
    noise: float = 0.05,
    solver: str = "dispatchable",
    steady_runs: int = 4,
    page: Recording | None = None,
) -> int:
    solver_for(solver)  # ValueError on an unknown name, before any work
    result = run(
        apps,
        seed,
        seeds,
        sizes or [10, 30],
        epochs,
        noise,
        progress=not as_json,
        solver=solver,
        steady_runs=steady_runs,
    )
    if plot_path:
        plot(result, plot_path)
        result["plot"] = plot_path
        if page is not None:
            page.plots.append(plot_path)
    rows = result["steady"].pop("_rows")
    if as_json:
        print(
            json.dumps(
                {**result, "steady": {**result["steady"], "epochs_detail": rows}}, indent=2, default=str
            )
        )
    else:
        render({**result, "steady": {**result["steady"], "_rows": rows}})
        if plot_path:
            print(f"plot: {plot_path}")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Plan and pack seeded generated fleets; print billed cost after packing over the occupancy lower "
        "bound per fleet size, the epoch time for --apps apps, a replay of every shared instance, and scale "
        "changes per hardware type under noisy steady load."
    )
    parser.add_argument("--apps", type=positive_int, default=100, help="apps in the main fleet (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    parser.add_argument("--seeds", type=positive_int, default=5, help="fleets per size (default 5)")
    parser.add_argument("--sizes", default="10,30", help="other fleet sizes, comma-separated (default 10,30)")
    parser.add_argument("--epochs", type=positive_int, default=24, help="steady-load epochs (default 24)")
    parser.add_argument(
        "--steady-runs",
        type=positive_int,
        default=4,
        help="steady-load runs, each on its own fleet and noise seed (default 4; the first in detail)",
    )
    parser.add_argument(
        "--noise", type=float, default=0.05, help="steady-load noise, +- fraction (default 0.05)"
    )
    parser.add_argument(
        "--solver",
        choices=SOLVERS,
        default="dispatchable",
        help="planner of the cost table and steady load: dispatchable (solve_dispatchable, what the control "
        "loop runs; default) or plain (solve); the epoch timing reports both",
    )
    parser.add_argument("--plot", default="fleet_packing.png", help="PNG path (default fleet_packing.png)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    add_results_arguments(parser)


def run_command(args: argparse.Namespace) -> int:
    try:
        sizes = [int(size) for size in args.sizes.split(",") if size.strip()]
    except ValueError:
        raise OptionError(f"--sizes must be comma-separated integers, got {args.sizes!r}") from None
    if any(size < 1 for size in sizes) or not 0 <= args.noise < 1:
        raise OptionError("--sizes must be positive and --noise a fraction in [0, 1)")
    return record(
        "fleet",
        args,
        lambda page: main(
            args.apps,
            args.seed,
            args.json,
            args.plot or None,
            seeds=args.seeds,
            sizes=sizes,
            epochs=args.epochs,
            noise=args.noise,
            solver=args.solver,
            steady_runs=args.steady_runs,
            page=page,
        ),
    )
