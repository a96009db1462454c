"""The fleet benchmark's changes of every app's problem at once (a new price list, a load ramp, a load drop,
longer service times, no plan at all) and the registrations' seed plans: the epochs that follow, solved at
once and with the control loop's solve budget."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from bench.fleet.common import SOLVE_BUDGET_S, dispatchable, solver_for, summary_ms
from planner.errors import PlannerError
from planner.fleet import SOLVED_KEY, RealisationCache, plan_fleet, seed_plan
from planner.models import Plan

if TYPE_CHECKING:
    from collections.abc import Mapping

    from planner.models import ProblemSpec


#: The benchmark's new price list (factor per hardware type, ``*`` for the rest): every type 5 % cheaper,
#: T4 20 % (a price cut on one instance family changes which configurations are cheapest).
PRICE_CHANGE: dict[str, float] = {"*": 0.95, "t4": 0.80}
#: The benchmark's load ramp: every app's rates 10 % up at once (past most plans' capacity).
RAMP = 1.10
#: The benchmark's load drop: every app's rates 20 % down at once (past the hold band of every plan).
DROP = 0.80
#: The benchmark's service-time change: every profile entry this much longer (s), as a larger hop
#: overhead (``SKINFLINT_HOP_OVERHEAD_S``) makes every duration.
SLOWER_S = 0.002


def registrations(problems: Mapping[str, ProblemSpec]) -> tuple[dict[str, Plan], list[float]]:
    """Every app solved as its registration solves it (control/registration/checks.py
    ``check_plannable``: the control loop's solve, without the epoch's schedule sharing) and stored as
    its seed (JSON, as in the registry): the seeds and each solve's CPU ms."""
    seeds: dict[str, Plan] = {}
    cpu: list[float] = []
    for app, problem in problems.items():
        cpu_start = time.process_time()
        try:
            plan = dispatchable(problem)
        except PlannerError:
            continue  # rejected at registration
        cpu.append((time.process_time() - cpu_start) * 1000)
        seeds[app] = Plan.model_validate_json(seed_plan(problem, plan, "skinflint").model_dump_json())
    return seeds, cpu


def repriced(problems: Mapping[str, ProblemSpec], change: Mapping[str, float]) -> dict[str, ProblemSpec]:
    """``problems`` at a new price list (``change``: factor per hardware type, ``*`` for the others)."""
    out: dict[str, ProblemSpec] = {}
    for app, problem in problems.items():
        hw = {
            hw: spec.model_copy(
                update={"price_per_hour": spec.price_per_hour * change.get(hw, change.get("*", 1.0))}
            )
            for hw, spec in problem.hardware.items()
        }
        out[app] = problem.model_copy(update={"hardware": hw})
    return out


def without_timings(value: Any) -> Any:
    """A plan's JSON without its timings (they differ from one solve of the same problem to the next)."""
    if isinstance(value, dict):
        return {
            key: without_timings(item)
            for key, item in value.items()
            if key not in ("solve_ms", "cpu_ms", "solve_cpu_ms")
        }
    if isinstance(value, list):
        return [without_timings(item) for item in value]
    return value


def ramped(problems: Mapping[str, ProblemSpec], factor: float) -> dict[str, ProblemSpec]:
    """``problems`` with every module's rate ``factor`` times (a load ramp seen by every app at once)."""
    return {
        app: problem.model_copy(
            update={
                "modules": {
                    module: spec.model_copy(update={"rate": spec.rate * factor})
                    for module, spec in problem.modules.items()
                }
            }
        )
        for app, problem in problems.items()
    }


def slowed(problems: Mapping[str, ProblemSpec], add_s: float) -> dict[str, ProblemSpec]:
    """``problems`` with every profile entry ``add_s`` seconds longer."""
    out: dict[str, ProblemSpec] = {}
    for app, problem in problems.items():
        modules = {
            module: spec.model_copy(
                update={
                    "profile": [
                        entry.model_copy(update={"duration_s": entry.duration_s + add_s})
                        for entry in spec.profile
                    ]
                }
            )
            for module, spec in problem.modules.items()
        }
        out[app] = problem.model_copy(update={"modules": modules})
    return out


def solved_plans(plans: Mapping[str, Plan]) -> dict[str, Any]:
    """Each app's solver plan (before shaping and packing), timings aside."""
    out: dict[str, Any] = {}
    for app, plan in plans.items():
        solved = (plan.model_extra or {}).get(SOLVED_KEY)
        modules = (
            solved
            if isinstance(solved, dict)
            else {module: mp.model_dump() for module, mp in plan.modules.items()}
        )
        out[app] = without_timings(json.loads(json.dumps(modules)))
    return out


def changed_problems(
    problems: Mapping[str, ProblemSpec],
    first: Any,
    solver: str,
    change: str,
    budget_s: float = SOLVE_BUDGET_S,
    max_epochs: int = 20,
) -> dict[str, Any]:
    """The epochs after every app's problem changed at once, from ``first`` (a ``FleetResult`` of
    ``problems``): ``change`` ``"prices"`` (a new price list, :data:`PRICE_CHANGE`: every plan still
    valid), ``"ramp"`` (every rate :data:`RAMP` times: plans outgrown), ``"drop"`` (every rate
    :data:`DROP` times: plans over-provisioned past the hold band), ``"slower"`` (every service
    time :data:`SLOWER_S` longer: plans re-timed, most of them grown) or ``"cold"`` (the same problems
    with no plan at all, ``first`` unused: a lost plan store, apps stored without a registration
    plan; the budgeted epochs give quick plans). Solved at once (no budget), and
    epoch by epoch with ``budget_s`` until no plan is carried (each epoch from the previous one's plans,
    one realisation cache, as one control-loop process); CPU ms and bill of each, and whether the
    budgeted epochs end with every app's solver plan (timings aside) of the unbudgeted one (their shaped
    and packed forms can differ with the previous fleet) and at what bill."""
    new = {
        "prices": lambda: repriced(problems, PRICE_CHANGE),
        "ramp": lambda: ramped(problems, RAMP),
        "drop": lambda: ramped(problems, DROP),
        "slower": lambda: slowed(problems, SLOWER_S),
        "cold": lambda: dict(problems),
    }[change]()
    fleet, plans = (None, {}) if change == "cold" else (first.fleet, first.plans)
    cpu_start = time.process_time()
    fresh = RealisationCache()
    how = solver_for(solver)
    ref = plan_fleet(new, previous=fleet, previous_plans=plans, solver=how, cache=fresh)
    ref_cpu = (time.process_time() - cpu_start) * 1000
    cache = RealisationCache()
    carried = [""]
    epochs: list[dict[str, Any]] = []
    while carried and len(epochs) < max_epochs:
        cpu_start = time.process_time()
        res = plan_fleet(
            new, previous=fleet, previous_plans=plans, solver=how, cache=cache, solve_budget_s=budget_s
        )
        epochs.append(
            {
                "cpu_ms": (time.process_time() - cpu_start) * 1000,
                "carried": len(res.carried),
                "resolved": len(res.resolved),
                "quick": len(res.quick),
                "billed_per_hour": res.fleet.billed_per_hour,
            }
        )
        fleet, plans, carried = res.fleet, res.plans, res.carried
    return {
        "change": change,
        "changed_apps": len(new) - len(ref.reused),
        "unbudgeted_cpu_ms": ref_cpu,
        "unbudgeted_billed_per_hour": ref.fleet.billed_per_hour,
        "budget_s": budget_s,
        "epochs": epochs,
        "converged": not carried,
        "same_solved_plans": solved_plans(plans) == solved_plans(ref.plans),
        "first_billed_over_unbudgeted": epochs[0]["billed_per_hour"] / ref.fleet.billed_per_hour,
        "last_billed_over_unbudgeted": epochs[-1]["billed_per_hour"] / ref.fleet.billed_per_hour,
    }


CHANGE_NAMES = {
    "prices": "new price list",
    "ramp": "load ramp",
    "drop": "load drop",
    "slower": "longer service times",
    "cold": "no plan at all",
}


def change_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`changed_problems` over the repeats: the unbudgeted epoch's CPU, the budgeted epochs' (every
    epoch of every run), how many epochs it took, and whether every run ended with the same plans."""
    budgeted = [epoch["cpu_ms"] for run in runs for epoch in run["epochs"]]
    return {
        "change": {
            "prices": dict(PRICE_CHANGE),
            "ramp": {"rates": RAMP},
            "drop": {"rates": DROP},
            "slower": {"duration_s +": SLOWER_S},
            "cold": {"previous plans": 0},  # (printed as "no previous plan")
        }[runs[0]["change"]],
        "budget_s": runs[0]["budget_s"],
        "changed_apps": runs[0]["changed_apps"],
        "unbudgeted_cpu": summary_ms([run["unbudgeted_cpu_ms"] for run in runs]),
        "budgeted_epoch_cpu": summary_ms(budgeted),
        "first_epoch_cpu": summary_ms([run["epochs"][0]["cpu_ms"] for run in runs]),
        "epochs_to_converge": [len(run["epochs"]) for run in runs],
        "converged": all(run["converged"] for run in runs),
        "same_solved_plans": all(run["same_solved_plans"] for run in runs),
        "first_billed_over_unbudgeted": max(run["first_billed_over_unbudgeted"] for run in runs),
        "last_billed_over_unbudgeted": [run["last_billed_over_unbudgeted"] for run in runs],
        "runs": runs,
    }
