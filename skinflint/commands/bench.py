"""`skinflint bench planner|fleet|diurnal`: planner, fleet and scale benchmarks (figures, tables, plots)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="run a benchmark and print its figures")
    bsub = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    planner = bsub.add_parser(
        "planner",
        help="every policy on generated problems, normalised to the exact optimum",
        description="Run every policy on seeded generated problems shaped like the papers' apps and "
        "random DAGs; print cost normalised to the exhaustive optimum and solve times.",
    )
    planner.add_argument("--problems", type=int, default=300, help="number of problems (default 300)")
    planner.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    planner.add_argument("--ablations", action="store_true", help="also run Harpagon's §IV-C ablations")
    planner.add_argument("--plot", default="planner_cdf.png", help="CDF plot path (default planner_cdf.png)")
    planner.add_argument("--json", action="store_true", help="print the figures as JSON")
    planner.set_defaults(func=run_planner)
    fleet = bsub.add_parser(
        "fleet",
        help="plan + pack epochs of generated multi-app fleets: cost, time, verification, steady load",
        description="Plan and pack seeded generated fleets; print billed cost after packing over the "
        "occupancy lower bound per fleet size, the epoch time for --apps apps, a replay of every shared "
        "instance, and scale changes per hardware type under noisy steady load.",
    )
    fleet.add_argument("--apps", type=_positive, default=100, help="apps in the main fleet (default 100)")
    fleet.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    fleet.add_argument("--seeds", type=_positive, default=5, help="fleets per size (default 5)")
    fleet.add_argument("--sizes", default="10,30", help="other fleet sizes, comma-separated (default 10,30)")
    fleet.add_argument("--epochs", type=_positive, default=24, help="steady-load epochs (default 24)")
    fleet.add_argument(
        "--steady-runs",
        type=_positive,
        default=4,
        help="steady-load runs, each on its own fleet and noise seed (default 4; the first in detail)",
    )
    fleet.add_argument(
        "--noise", type=float, default=0.05, help="steady-load noise, +- fraction (default 0.05)"
    )
    fleet.add_argument(
        "--solver",
        choices=("dispatchable", "plain"),
        default="dispatchable",
        help="planner of the cost table and steady load: dispatchable (solve_dispatchable, what the control "
        "loop runs; default) or plain (solve); the epoch timing reports both",
    )
    fleet.add_argument("--plot", default="fleet_packing.png", help="PNG path (default fleet_packing.png)")
    fleet.add_argument("--json", action="store_true", help="print the figures as JSON")
    fleet.set_defaults(func=run_fleet)
    _register_diurnal(bsub)


def run_planner(args: argparse.Namespace) -> int:
    from bench.planner import main

    return main(args.problems, args.seed, args.ablations, args.json, args.plot)


def _positive(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def run_fleet(args: argparse.Namespace) -> int:
    from bench.fleet import main
    from skinflint.errors import UsageError

    try:
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--sizes must be comma-separated integers, got {args.sizes!r}") from None
    if any(s < 1 for s in sizes) or not 0 <= args.noise < 1:
        raise UsageError("--sizes must be positive and --noise a fraction in [0, 1)")
    return main(
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
    )


def _register_diurnal(bsub: Any) -> None:
    p = bsub.add_parser(
        "diurnal",
        help="a day of diurnal load over many apps: epoch re-planning vs static peak provisioning",
        description="Simulate a day of diurnal load (night trough, morning ramp, noise, a flash crowd) over "
        "many apps built from the demo applications, re-planned every epoch from forecasts of past epochs, "
        "and compare billed cost and SLO attainment with static peak provisioning (docs/scale.md).",
    )
    p.add_argument("--apps", type=_positive, default=24, help="apps (default 24)")
    p.add_argument("--peak", type=float, default=100_000.0, help="busiest minute, frames/s (default 100000)")
    p.add_argument("--epochs", type=_positive, default=96, help="epochs per day, dividing 1440 (default 96)")
    p.add_argument("--seed", type=int, default=0, help="load seed (default 0)")
    p.add_argument(
        "--headroom",
        default="0.05,0.1,0.2",
        help="forecast headrooms to sweep, comma-separated; the smallest meeting the target is reported "
        "(default 0.05,0.1,0.2)",
    )
    p.add_argument(
        "--target", type=float, default=0.99, help="fraction of frames within the SLO (default 0.99)"
    )
    p.add_argument(
        "--sample-s",
        type=float,
        default=2.0,
        help="simulated seconds per load level, two levels per app and epoch (default 2)",
    )
    p.add_argument(
        "--arrivals",
        choices=("uniform", "poisson", "bursty"),
        default="uniform",
        help="arrival process of the simulated samples (default uniform)",
    )
    p.add_argument(
        "--solver",
        choices=("plain", "dispatchable"),
        default="dispatchable",
        help="planner.robust.solve_dispatchable (the default: what the control loop runs) or planner.solve "
        "(Theorem-1 plans, not realised by the dispatch)",
    )
    p.add_argument(
        "--profiles",
        choices=("packaged", "store"),  # bench.diurnal.PROFILE_SOURCES (not imported here)
        default="packaged",
        help="the demo models' profiles: packaged (the default: the committed measurements, the same "
        "figures on every machine) or store (the build cache of skinflint models build / demo over them: "
        "this host's measurements)",
    )
    p.add_argument("--workers", type=_positive, default=2, help="processes running simulations (default 2)")
    p.add_argument("--no-oracle", action="store_true", help="skip the perfect-foresight oracle")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--plots", metavar="DIR", default=None, help="write the PNG plots into DIR")
    p.set_defaults(func=run_diurnal)


def run_diurnal(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from bench.diurnal import main
    from bench.scenario import LoadConfig, PolicyConfig
    from skinflint.errors import UsageError

    try:
        headrooms = [float(x) for x in args.headroom.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--headroom must be comma-separated numbers, got {args.headroom!r}") from None
    if not headrooms or any(not 0 <= h <= 5 for h in headrooms):
        raise UsageError(f"--headroom must list fractions in [0, 5], got {args.headroom!r}")
    if not 0 < args.target <= 1:
        raise UsageError(f"--target must be a fraction in (0, 1], got {args.target}")
    try:
        load = LoadConfig(apps=args.apps, peak_rps=args.peak, epochs=args.epochs, seed=args.seed)
        policy = PolicyConfig(
            headroom=headrooms[0], sample_s=args.sample_s, arrivals=args.arrivals, solver=args.solver
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "settings"
        raise UsageError(f"bad {where}: {err['msg']}") from None
    return main(
        load,
        policy,
        headrooms,
        as_json=args.json,
        plots_dir=args.plots,
        target=args.target,
        oracle=not args.no_oracle,
        workers=args.workers,
        profiles=args.profiles,
    )
