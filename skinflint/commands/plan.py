"""`skinflint plan PROBLEM.json`: the planner's plan as a readable table (or JSON)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from skinflint.errors import UsageError

if TYPE_CHECKING:
    import argparse


def register(sub: Any) -> None:
    from planner.policies import POLICIES

    p = sub.add_parser(
        "plan",
        help="plan a problem file and show the plan as a table",
        description="Plan a problem file (docs/design.md §3 format) and show the plan.",
    )
    p.add_argument("problem", help="problem JSON file")
    p.add_argument(
        "--policy",
        default="skinflint",
        choices=list(POLICIES),
        metavar="NAME",
        help="planning policy (default skinflint; see `python -m planner solve --help`)",
    )
    p.add_argument(
        "--objective",
        default="billed",
        choices=["occupancy", "billed"],
        help="cost the plan minimises (default billed)",
    )
    p.add_argument("--json", action="store_true", help="print the plan JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from planner.cli import load_problem
    from planner.errors import InfeasibleError, PlannerError
    from planner.solve import solve

    try:
        problem = load_problem(args.problem)
        plan = solve(problem, policy=args.policy, objective=args.objective)
    except InfeasibleError as exc:
        raise UsageError(str(exc), exit_code=2) from None
    except PlannerError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(plan.model_dump(mode="json"), indent=2))
        return 0
    render(plan)
    return 0


def render(plan: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    extra = plan.model_extra or {}
    table = Table(
        title=f"{extra.get('name', 'plan')} — policy {extra.get('policy')}, objective {plan.objective}, "
        f"SLO {extra.get('slo_s')} s"
    )
    for col in [
        "module",
        "rate",
        "dummy",
        "group (TC order)",
        "machines",
        "req/s each",
        "wcl s",
        "budget s",
        "occupancy $/h",
        "billed $/h",
    ]:
        table.add_column(col, justify="left" if col in ("module", "group (TC order)") else "right")
    for name, m in plan.modules.items():
        me = m.model_extra or {}
        for k, g in enumerate(m.groups):
            first = k == 0
            table.add_row(
                name if first else "",
                f"{me.get('rate', 0):.1f}" if first else "",
                f"{m.dummy_rate:.1f}" if first else "",
                f"{g.hardware} b{g.batch} c{g.concurrency} d={g.duration_s * 1000:.1f}ms",
                str(g.machines),
                f"{g.rate_per_machine:.1f}",
                f"{m.worst_case_latency_s:.4f}" if first else "",
                f"{m.latency_budget_s:.4f}" if first else "",
                f"{me.get('occupancy_per_hour', 0):.3f}" if first else "",
                f"{me.get('billed_per_hour', 0):.3f}" if first else "",
            )
    console = Console(width=max(Console().width, 130))
    console.print(table)
    for p in extra.get("paths", []):
        console.print(f"path {' -> '.join(p['modules'])}: worst case {p['worst_case_latency_s']:.4f} s")
    proof = "proven optimal" if extra.get("proven_optimal") else "heuristic"
    console.print(
        f"occupancy cost ${plan.cost_per_hour:.3f}/h, billed ${plan.billed_per_hour:.3f}/h "
        f"({proof}; solved in {plan.solve_ms:.2f} ms)"
    )
