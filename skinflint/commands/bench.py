"""`skinflint bench planner`: the planner benchmark (figures, table, CDF plot)."""

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


def run_planner(args: argparse.Namespace) -> int:
    from skinflint.bench_planner import main

    return main(args.problems, args.seed, args.ablations, args.json, args.plot)
