"""What the fleet benchmark's parts share: its targets, the control loop's solve budget, the two solvers
(:data:`SOLVERS`) and the figures' helpers."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from planner.check import check_plan
from planner.packing import check_fleet
from planner.robust import DEFAULT_CHILD_HEADROOM, solve_dispatchable
from planner.solve import solve

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from planner.models import Plan, ProblemSpec

    Solver = Callable[[ProblemSpec], Plan]


TARGET_RATIO = 1.05
TARGET_EPOCH_S = 1.0
#: The control loop's default solve budget (control.epoch.ControlConfig.solve_budget_s).
SOLVE_BUDGET_S = 0.4
#: ``plain``: plan_fleet's own billed solve; ``dispatchable``: the control loop's solver
#: (``control/epoch.py``: ``solve_dispatchable``, billed, default child headroom).
SOLVERS = ("dispatchable", "plain")


def solver_for(name: str) -> Solver | None:
    """The solver ``plan_fleet`` is given for ``name`` (None: its own plain solve)."""
    if name == "plain":
        return None
    if name == "dispatchable":
        return dispatchable
    raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {name!r}")


def dispatchable(
    problem: ProblemSpec, *, schedules: dict[Any, Any] | None = None, first_found: bool = False
) -> Plan:
    """What the control loop runs (``control/epoch.py`` ``_solver``), sharing the fleet's
    schedule cache (and its quick mode, which a budgeted epoch asks for)."""
    return solve_dispatchable(
        problem,
        policy="skinflint",
        objective="billed",
        child_headroom=DEFAULT_CHILD_HEADROOM,
        schedules=schedules,
        first_found=first_found,
    )


class Reuse:
    """A solver that solves each distinct problem once (the FIFO-only comparison and the dedicated
    figure use the same plans as the fleet, without solving again). Returns a copy: ``plan_fleet``
    writes its digests into the plan."""

    def __init__(self, solver: Solver | None) -> None:
        self.solver = solver
        self.plans: dict[str, Plan] = {}

    def __call__(self, problem: ProblemSpec) -> Plan:
        key = problem.model_dump_json()
        if key not in self.plans:
            self.plans[key] = (
                self.solver(problem) if self.solver is not None else solve(problem, objective="billed")
            )
        return self.plans[key].model_copy(deep=True)


def summary_ms(xs: list[float]) -> dict[str, float]:
    return {"median_ms": statistics.median(xs), "min_ms": min(xs), "max_ms": max(xs)}


def fleet_errors(problems: Mapping[str, ProblemSpec], res: Any) -> list[str]:
    apps = {app: (problems[app], res.plans[app]) for app in res.plans}
    return check_fleet(res.fleet, apps) + [
        error for app, (problem, plan) in apps.items() for error in check_plan(problem, plan)
    ]
