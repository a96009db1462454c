"""`skinflint bench planner|fleet`: the planner and fleet benchmarks (figures, tables, plots)."""

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
    fleet.add_argument(
        "--sizes", default="10,30", help="other fleet sizes, comma-separated (default 10,30)"
    )
    fleet.add_argument("--epochs", type=_positive, default=24, help="steady-load epochs (default 24)")
    fleet.add_argument(
        "--noise", type=float, default=0.05, help="steady-load noise, +- fraction (default 0.05)"
    )
    fleet.add_argument("--plot", default="fleet_packing.png", help="PNG path (default fleet_packing.png)")
    fleet.add_argument("--json", action="store_true", help="print the figures as JSON")
    fleet.set_defaults(func=run_fleet)


def run_planner(args: argparse.Namespace) -> int:
    from skinflint.bench_planner import main

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
    from skinflint.bench_fleet import main
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
    )
