"""Plan extras an epoch writes and reads (problem digests, the solver's own plan, the ``keep`` of the
shaping, carried plans), and the digest a registration's seed plan is stamped with."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from planner.models import ModulePlan, Plan

if TYPE_CHECKING:
    from planner.models import ProblemSpec

__all__ = [
    "BOUND_KEY",
    "CARRIED_KEY",
    "DIGEST_KEY",
    "FULL_SOLVE_KEY",
    "KEEP_KEY",
    "RATES_KEY",
    "SHAPE_KEY",
    "SOLVED_KEY",
    "SPLIT_KEY",
    "is_tc",
    "problem_digest",
    "proven_gap",
    "seed_plan",
    "solved_modules",
]

#: Plan extra keys: the digest of the problem the plan was solved for, the solver's own plan (so a later
#: epoch can reshape without solving again), and the ``keep`` the plan was shaped with.
DIGEST_KEY = "problem_digest"

SHAPE_KEY = "problem_shape_digest"  # the problem with its rates left out

RATES_KEY = "solved_rates"  # module rates the plan was solved for

SOLVED_KEY = "solved_modules"

KEEP_KEY = "packing_keep"

#: Plan extra key of a plan carried over a change of its app's problem (:func:`plan_fleet`'s
#: ``solve_budget_s``): ``digest``, the problem digest it was solved for, and ``sticky``, whether only the
#: rates changed (it is then solved again as an epoch without a budget solves a plan its rates outgrew,
#: :func:`sticky_plan`). The app is solved again when the budget allows. A quick plan (the solver's first
#: realisable plan, made when a budgeted epoch has more apps without a plan than it can solve in full)
#: carries the same mark with ``quick: True`` and its own problem's digest.
CARRIED_KEY = "carried_from"

#: Plan extra key of a quick plan taken as its app's plan because the full solve of the same problem
#: failed (no realisable plan in its rounds): that solve's one-line error.
FULL_SOLVE_KEY = "full_solve_error"

#: Plan extra key: the digest of the problem the plan's ``lower_bound_per_hour`` (the solver's certified
#: bound on the optimum, :func:`planner.robust.solve_dispatchable`) was proven for. A plan held at new
#: rates or carried to another problem keeps its old bound, which then bounds another problem.
BOUND_KEY = "bound_digest"

#: Module extra key of a residual split: the extra worst case of its full machines, b / W (s).
SPLIT_KEY = "split_penalty_s"


def problem_digest(problem: ProblemSpec, policy: str, tighten: float = 0.0) -> str:
    """Stable digest of a problem and how it is planned (equal digests: the old plan still holds)."""
    blob = f"{problem.model_dump_json(exclude={'name'})}|{policy}|{tighten!r}"
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def seed_plan(problem: ProblemSpec, plan: Plan, policy: str) -> Plan:
    """``plan``, solved for ``problem`` by the solver an epoch uses, marked for :func:`plan_fleet`'s
    ``seeds``: a copy that records the problem's digest. An app's registration solves it as its first
    epoch will (control/registration/checks.py); the epoch then takes that plan instead of solving again,
    as long as the problem it plans is still the same (same rates, catalog, hardware, policy)."""
    out = plan.model_copy()
    out.model_extra[DIGEST_KEY] = problem_digest(problem, policy)  # type: ignore[index]
    out.model_extra[RATES_KEY] = {m: spec.rate for m, spec in problem.modules.items()}  # type: ignore[index]
    return out


def solved_modules(plan: Plan) -> dict[str, ModulePlan]:
    """The solver's module plans: the shaped plan's record of them, or the plan's own."""
    rec = (plan.model_extra or {}).get(SOLVED_KEY)
    if isinstance(rec, dict):
        return {m: ModulePlan.model_validate(v) for m, v in rec.items()}
    return dict(plan.modules)


def is_tc(plan: Plan) -> bool:
    return bool((plan.model_extra or {}).get("latency_model", "tc") == "tc")


def proven_gap(plan: Plan) -> float | None:
    """The proven optimality gap of ``plan`` as an epoch took it: (cost - bound) / cost in its
    objective, with the solver's certified bound for the problem the plan serves (0: proven optimal);
    None where there is none (no certified bound, a plan held at new rates or carried to
    another problem: its bound was proven for another problem)."""
    extra = plan.model_extra or {}
    bound = extra.get("lower_bound_per_hour")
    if bound is None or extra.get(DIGEST_KEY) is None or extra.get(BOUND_KEY) != extra.get(DIGEST_KEY):
        return None
    cost = plan.billed_per_hour if plan.objective == "billed" else plan.cost_per_hour
    return max(0.0, (cost - float(bound)) / cost) if cost > 0 else 0.0
