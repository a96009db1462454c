"""Benchmark of the dispatch schedule + simulator: prints figures (a rich table, or JSON with ``--json``).

    skinflint bench simulator                 # large synthetic plan, 10 simulated minutes
    skinflint bench simulator --duration 60   # shorter while iterating
    skinflint bench simulator --check         # the papers' examples (docs/design.md §7)
    skinflint bench simulator --generated 100 # dispatch-aware solves of generated problems

The large plan is built directly (no solver): a three-module DAG (detector -> car, detector -> person)
serving 100,000 req/s in total on ~1,000 machines, every detector machine at full throughput. Every plan
(large and papers') is made dispatch-realisable the way :mod:`planner.robust` does it: a child gets the
machines its bursts need (``required_rate``) and every module's ``worst_case_latency_s`` is the realised
figure (schedule bound + burst), so "measured <= planned" checks the dispatch against what the plan
claims; Theorem 1's figure is printed beside it. ``--generated`` runs
:func:`planner.robust.solve_dispatchable` on generated problems and simulates each plan (uniform
arrivals): within plan, overflows, price of realisability against the plain (Theorem-1) optimum; joins
(modules with several parents) are counted apart as well. Exit status 1 when a TC plan is not within
its figures or a window overflows. ``--arrival-study N`` plans N generated apps with the control loop's
10 % headroom and simulates each under uniform, Poisson and bursty frames, with no admission, windows
capped at their batch, the front's admission (windows capped at what the plan sized the children
for), and that admission in three fronts that count apart (a Lambda front without the shared counts):
frames shed, admitted frames within the SLO (exit status 1 unless all of them, with the front's
admission, and no window overflows).

    skinflint bench simulator --arrival-study 100   # about 10 s
    skinflint bench simulator --arrival-study 100 --headroom 0.1 --reserve 0.2
    skinflint bench simulator --reserve-study 30    # a shed_target as the rate moves

    skinflint bench simulator --hop-study 150       # measured hop delays (bench/data/hops-*.json)

``--hop-study N`` plans N generated apps with the control loop's hop rule (the p99 of measured
deliveries, as latency only) and simulates each with every request's hop drawn from those deliveries
(``--hops FILE``: a JSON file with ``delays_ms`` or a demo's ``tasks.jsonl``; default the packaged
local-stack measurement): admitted frames within the SLO, and the cost against the same apps planned
with the hop billed as device time (exit status 1 when an app falls below 99 %; bench/simulator/hops.py).

``--reserve-study N`` chooses each generated app's admission reserve for a 1 % shed target at its
rates, as a registration does, then compares at half and twice those rates the reserve kept with the
reserve chosen again (the control loop's review, control/reserves.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from bench.results import add_results_arguments, record
from bench.simulator.check import generated, print_generated, print_runs, run
from bench.simulator.hops import DEFAULT_HOPS, run_hop_study
from bench.simulator.plans import EXAMPLES, dispatchable, example_plans, large_problem
from bench.simulator.studies import (
    ADMISSIONS,
    UNSHARED_FRONTS,
    arrival_study,
    print_arrival_study,
    print_reserve_study,
    reserve_study,
)

if TYPE_CHECKING:
    import argparse

__all__ = [
    "ADMISSIONS",
    "EXAMPLES",
    "UNSHARED_FRONTS",
    "add_arguments",
    "arrival_study",
    "dispatchable",
    "example_plans",
    "generated",
    "large_problem",
    "main",
    "reserve_study",
    "run",
    "run_command",
]

DEFAULT_DURATION_S = 600.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Benchmark the dispatch schedule and the simulator: a 100,000 req/s plan on ~1,000 machines (the "
        "default), the papers' examples (--check), dispatch-aware solves of generated problems "
        "(--generated), the arrival process with and without the front's admission (--arrival-study) and "
        "a shed_target's reserve as the rate moves (--reserve-study). Exit status 1 when a TC plan is not "
        "within its figures or a window overflows."
    )
    parser.add_argument(
        "--duration", type=float, default=DEFAULT_DURATION_S, help="simulated seconds (default 600)"
    )
    parser.add_argument("--arrivals", choices=["uniform", "poisson", "bursty"], default="uniform")
    parser.add_argument("--dispatch", choices=["tc", "rr"], default="tc")
    parser.add_argument(
        "--check", action="store_true", help="the papers' examples, TC and RR, uniform arrivals"
    )
    parser.add_argument(
        "--generated", type=int, default=0, metavar="N", help="dispatch-aware solves of N generated problems"
    )
    parser.add_argument(
        "--arrival-study",
        type=int,
        default=0,
        metavar="N",
        help="N generated apps under uniform, Poisson and bursty arrivals, with and without admission",
    )
    parser.add_argument(
        "--headroom", type=float, default=0.1, help="--arrival-study: plan for the rates x (1 + this) (0.1)"
    )
    parser.add_argument(
        "--reserve",
        type=float,
        default=0.0,
        help="--arrival-study: plan for the SLO x (1 - this), the rest for spilled frames (0)",
    )
    parser.add_argument(
        "--reserve-study",
        type=int,
        default=0,
        metavar="N",
        help="N generated apps: a shed_target's reserve kept from the registered rate against chosen again "
        "at 0.5x and 2x that rate (the control loop's review)",
    )
    parser.add_argument(
        "--hop-study",
        type=int,
        default=0,
        metavar="N",
        help="N generated apps planned with the measured hops' p99 and simulated with hops drawn from them",
    )
    parser.add_argument(
        "--hops",
        type=Path,
        default=DEFAULT_HOPS,
        metavar="FILE",
        help="--hop-study: hop samples (JSON with delays_ms, or a demo's tasks.jsonl); default the packaged "
        "local-stack measurement",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_results_arguments(parser)


def run_command(args: argparse.Namespace) -> int:
    return record("simulator", args, lambda _page: main(args))


def _duration(args: argparse.Namespace, default_s: float) -> float:
    """``--duration``, or ``default_s`` where it was left at the large plan's default."""
    return float(args.duration) if args.duration != DEFAULT_DURATION_S else default_s


def main(args: argparse.Namespace) -> int:
    """The mode the options pick, printed (a table, or JSON); the exit status of its check."""
    if args.hop_study:
        args.default_duration = DEFAULT_DURATION_S
        return run_hop_study(args)
    if args.reserve_study:
        reserves = reserve_study(args.reserve_study)
        if args.json:
            print(json.dumps(reserves, indent=2))
        else:
            print_reserve_study(reserves)
        return 0
    if args.arrival_study:
        study = arrival_study(
            args.arrival_study, _duration(args, 20.0), headroom=args.headroom, reserve=args.reserve
        )
        if args.json:
            print(json.dumps(study, indent=2))
        else:
            print_arrival_study(study)
        planned = [row for key, row in study.items() if key.endswith("/planned") and isinstance(row, dict)]
        return (
            0 if all(row["apps_overflowing"] == 0 and row["attainment_min"] == 1.0 for row in planned) else 1
        )
    if args.generated:
        solved = generated(args.generated, _duration(args, 10.0))
        if args.json:
            print(json.dumps(solved, indent=2))
        else:
            print_generated(solved)
        tallies = [row for row in solved.values() if isinstance(row, dict)]
        return 0 if all(row["within"] == row["modules"] and row["overflow"] == 0 for row in tallies) else 1
    if args.check:
        results = [
            run(problem, plan, _duration(args, 120.0), "uniform", dispatch)
            for problem, plan in example_plans()
            for dispatch in ("tc", "rr")
        ]
    else:
        problem, plan = large_problem()
        results = [run(problem, plan, args.duration, args.arrivals, args.dispatch)]
    ok = all(
        result["all_within_plan"]
        for result in results
        if result["dispatch"] == "tc" and result["arrivals"] == "uniform"
    )
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_runs(results)
    return 0 if ok else 1
