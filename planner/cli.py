"""Command line of the pure planner: ``python -m planner solve PROBLEM.json``.

Prints the plan JSON on stdout. Bad input exits 1 with one line on stderr; an infeasible problem
exits 2 naming the tightest path and its minimum latency.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from pydantic import ValidationError

from planner.errors import InfeasibleError, PlannerError, ProblemError
from planner.models import ProblemSpec
from planner.policies import POLICIES
from planner.solve import solve

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["load_problem", "main"]


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "problem"
    return f"{where}: {err['msg']}"


def load_problem(path: str) -> ProblemSpec:
    """Read and validate a problem file; every failure is a one-line :class:`ProblemError`."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except FileNotFoundError:
        raise ProblemError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ProblemError(
            f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    return parse_problem(raw, path)


def parse_problem(raw: object, source: str = "problem") -> ProblemSpec:
    if not isinstance(raw, dict):
        raise ProblemError(f"{source}: expected a JSON object")
    try:
        return ProblemSpec.model_validate(raw)
    except ValidationError as exc:
        raise ProblemError(f"{source}: {_first_error(exc)}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m planner", description="Skinflint's cost-minimising planner."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    solve_cmd = sub.add_parser("solve", help="plan a problem file and print the plan JSON")
    solve_cmd.add_argument("problem", help="problem JSON file (docs/design.md §3)")
    solve_cmd.add_argument(
        "--policy",
        default="skinflint",
        choices=list(POLICIES),
        metavar="NAME",
        help=f"planning policy (default skinflint): {', '.join(POLICIES)}",
    )
    solve_cmd.add_argument(
        "--objective",
        default="billed",
        choices=["occupancy", "billed"],
        help="cost the plan minimises (default billed)",
    )
    solve_cmd.add_argument("--indent", type=int, default=2, help="JSON indent (default 2)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        problem = load_problem(args.problem)
        plan = solve(problem, policy=args.policy, objective=args.objective)
    except InfeasibleError as exc:
        print(f"planner: {exc}", file=sys.stderr)
        return 2
    except PlannerError as exc:
        print(f"planner: error: {exc}", file=sys.stderr)
        return 1
    try:
        print(json.dumps(plan.model_dump(mode="json"), indent=args.indent or None), flush=True)
    except BrokenPipeError:  # the reader went away (``... | head``): stop without a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit flush goes nowhere
        return 1
    return 0
