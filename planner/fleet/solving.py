"""An epoch's solve phase: which apps keep, take, carry or solve again their plan, within the CPU budget."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

from planner.errors import PlannerError
from planner.fleet.carry import at_rates, carry_plan, sticky_plan
from planner.fleet.keys import (
    BOUND_KEY,
    CARRIED_KEY,
    DIGEST_KEY,
    FULL_SOLVE_KEY,
    RATES_KEY,
    SHAPE_KEY,
    problem_digest,
)
from planner.fleet.planning import Memo, Planning, Solved
from planner.robust import FIRST_FOUND_KEY, schedule_key

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from planner.fleet.realised import RealisationCache, Schedules
    from planner.models import Plan, ProblemSpec

__all__ = ["solve_all"]


def solve_all(
    problems: Mapping[str, ProblemSpec],
    previous_plans: Mapping[str, Plan],
    seeds: Mapping[str, Plan],
    how: Planning,
    memo: Memo,
) -> Solved:
    started = time.thread_time()  # this thread: the local stack plans beside its workers
    out = Solved()
    pending: list[str] = []  # apps on a carried plan: solved again while the budget lasts
    unplanned: list[str] = []  # apps with no plan that serves them: solved now
    for app in sorted(problems):
        problem = problems[app]
        schedules = memo.of(app)
        digest = problem_digest(problem, how.policy, how.tighten)
        old = previous_plans.get(app)
        extra = (old.model_extra or {}) if old is not None else {}
        if old is not None and extra.get(DIGEST_KEY) == digest:
            out.plans[app] = old
            (pending if how.budget is not None and CARRIED_KEY in extra else out.reused).append(app)
            continue
        shape = problem_digest(_rateless(problem), how.policy, how.tighten)
        held = (
            at_rates(problem, old, digest, memo.cache, schedules)
            if old is not None and extra.get(SHAPE_KEY) == shape and _holds(problem, old, how.hold)
            else None
        )
        if held is not None:
            out.plans[app] = held
            (pending if how.budget is not None and CARRIED_KEY in extra else out.reused).append(app)
            continue
        seed = seeds.get(app)
        if seed is not None and how.tighten <= 0 and (seed.model_extra or {}).get(DIGEST_KEY) == digest:
            out.seeded.append(app)
            out.plans[app] = _taken(
                problem, old, seed.model_copy(), how, memo.cache, schedules
            )  # the solver's
            continue
        carried = carry_plan(problem, old, digest, shape, how, memo.cache, schedules) or carry_plan(
            problem, seed, digest, shape, how, memo.cache, schedules
        )
        if carried is not None:
            out.plans[app] = carried
            pending.append(app)
            continue
        unplanned.append(app)
    _solve_unplanned(problems, previous_plans, unplanned, how, memo, started, out, pending)
    _resolve(problems, pending, how, memo, started, out)
    return out


def _solve_unplanned(
    problems: Mapping[str, ProblemSpec],
    previous_plans: Mapping[str, Plan],
    apps: Sequence[str],
    how: Planning,
    memo: Memo,
    started: float,
    out: Solved,
    pending: list[str],
) -> None:
    """Solve ``apps`` (none has a plan that serves it). With a budget and a solver that has a quick
    mode (``first_found``), once the solve phase's CPU so far plus the rest at the mean CPU of this
    epoch's full solves would pass the budget, an app that is new to its problem's shape (no previous
    plan to stick to) gets the solver's first realisable plan, marked carried (``quick``): it is solved
    in full in a later epoch, dearest first, as carried plans are (:func:`_resolve`). With a budget, an
    app whose solve failed in this process's last epoch (``memo.cache``, :meth:`RealisationCache.failure`)
    fails again with the same error without a solve while its problem is the same: the solve is
    deterministic but for its CPU budget, and such apps, solved first in every epoch, would otherwise
    spend the budget that the carried plans need."""
    full_cpu: list[float] = []
    for i, app in enumerate(apps):
        problem = problems[app]
        old = previous_plans.get(app)
        shape = problem_digest(_rateless(problem), how.policy, how.tighten)
        sticks = old is not None and (old.model_extra or {}).get(SHAPE_KEY) == shape and how.stick > 0
        digest = problem_digest(problem, how.policy, how.tighten)
        known = memo.cache.failure(digest) if memo.cache is not None and how.budget is not None else None
        if known is not None:  # failed in a recent epoch: not solved again while its problem is the same
            out.failed[app] = known
            continue
        quick = False
        if how.budget is not None and how.quick and not sticks and full_cpu:
            mean = sum(full_cpu) / len(full_cpu)
            quick = time.thread_time() - started + mean * (len(apps) - i) > how.budget
        began = time.thread_time()
        try:
            plan = _solved_plan(problem, how, memo.of(app), first_found=quick)
        except PlannerError as exc:
            out.failed[app] = (str(exc).splitlines() or [type(exc).__name__])[0]
            if memo.cache is not None and how.budget is not None:
                memo.cache.fail(digest, out.failed[app])
            continue
        if not quick:
            full_cpu.append(time.thread_time() - began)
        if (plan.model_extra or {}).get(FIRST_FOUND_KEY):
            plan = _stamped(problem, plan, digest, shape, memo.of(app))
            mark = {"digest": digest, "sticky": False, "quick": True}
            out.plans[app] = plan.model_copy(update={CARRIED_KEY: mark})
            out.quick.append(app)
            pending.append(app)
            continue
        out.plans[app] = _taken(problem, old, plan, how, memo.cache, memo.of(app))


def _taken(
    problem: ProblemSpec,
    old: Plan | None,
    plan: Plan,
    how: Planning,
    cache: RealisationCache | None,
    schedules: Schedules | None,
) -> Plan:
    """The solver's ``plan`` for ``problem`` as the epoch takes it: the previous plan ``old`` grown
    instead when only the rates changed and it bills at most ``how.stick`` more (:func:`sticky_plan`),
    stamped with the problem it serves."""
    digest = problem_digest(problem, how.policy, how.tighten)
    shape = problem_digest(_rateless(problem), how.policy, how.tighten)
    if old is not None and (old.model_extra or {}).get(SHAPE_KEY) == shape and how.stick > 0:
        plan = sticky_plan(problem, old, plan, how, cache, schedules)
    return _stamped(problem, plan, digest, shape, schedules)


def _solved_plan(
    problem: ProblemSpec, how: Planning, schedules: Schedules | None, *, first_found: bool = False
) -> Plan:
    """The solver's plan for ``problem`` (for an SLO ``how.tighten`` shorter; its quick mode when
    ``first_found``)."""
    target = (
        problem
        if how.tighten <= 0
        else problem.model_copy(update={"slo_s": problem.slo_s * (1 - how.tighten)})
    )
    return how.plan(target, schedules, first_found=first_found)


def _stamped(problem: ProblemSpec, plan: Plan, digest: str, shape: str, schedules: Schedules | None) -> Plan:
    """``plan`` marked with the problem it serves (its digest, its digest without rates, its rates)."""
    if schedules:
        _keep_planned(schedules, problem, plan)
    plan.model_extra[DIGEST_KEY] = digest  # type: ignore[index]
    plan.model_extra[BOUND_KEY] = digest  # type: ignore[index]  # the solver's bound (if any) is this problem's
    plan.model_extra[SHAPE_KEY] = shape  # type: ignore[index]
    plan.model_extra[RATES_KEY] = {m: spec.rate for m, spec in problem.modules.items()}  # type: ignore[index]
    plan.model_extra.pop(CARRIED_KEY, None)  # type: ignore[union-attr]
    return plan


def _resolve(
    problems: Mapping[str, ProblemSpec],
    pending: Sequence[str],
    how: Planning,
    memo: Memo,
    started: float,
    out: Solved,
) -> None:
    """Solve the apps on a carried plan again, dearest first, while the solve phase has spent less than
    ``how.budget`` CPU seconds (since ``started``); the others keep their carried plan (``out.carried``).
    An app whose solve fails keeps it too; a quick plan (realisable, made for the problem the app has)
    is then taken as the app's plan, no longer carried, with the full solve's error under
    :data:`FULL_SOLVE_KEY` (otherwise the dearest quick plans whose full solve fails would take the
    budget of every later epoch and the others would never be solved). The fresh plan is taken as an
    epoch without a budget takes it (through :func:`sticky_plan` when only the rates changed): once none
    is carried every app has the solver plan such an epoch gives it."""
    assert how.budget is not None or not pending
    order = sorted(pending, key=lambda a: (-out.plans[a].billed_per_hour, a))
    for app in order:
        if time.thread_time() - started >= cast("float", how.budget):
            out.carried.append(app)
            continue
        problem = problems[app]
        schedules = memo.of(app)
        carried = out.plans[app]
        mark = (carried.model_extra or {}).get(CARRIED_KEY)
        try:
            plan = _solved_plan(problem, how, schedules)
        except PlannerError as exc:
            if isinstance(mark, dict) and mark.get("quick"):  # its problem's own realisable plan: kept
                kept = carried.model_copy(update={FULL_SOLVE_KEY: (str(exc).splitlines() or ["failed"])[0]})
                kept.model_extra.pop(CARRIED_KEY, None)  # type: ignore[union-attr]
                out.plans[app] = kept
                out.resolved.append(app)
            else:
                out.carried.append(app)
            continue
        if isinstance(mark, dict) and mark.get("sticky") and how.stick > 0:  # carried over higher rates
            plan = sticky_plan(problem, carried, plan, how, memo.cache, schedules)
        digest = problem_digest(problem, how.policy, how.tighten)
        shape = problem_digest(_rateless(problem), how.policy, how.tighten)
        out.plans[app] = _stamped(problem, plan, digest, shape, schedules)
        out.resolved.append(app)
    out.carried.sort()
    out.resolved.sort()


def _keep_planned(schedules: Schedules, problem: ProblemSpec, plan: Plan) -> None:
    """Keep only the schedules of ``plan``'s modules (in place): the app's shapes and realisations reuse
    those (a module they leave as solved); the solver's other rounds' would only be held through the
    epoch, which costs memory and garbage-collector time."""
    prices = {h: x.price_per_hour for h, x in problem.hardware.items()}
    used = {schedule_key(m, mp, prices) for m, mp in plan.modules.items()}
    for key in [k for k in schedules if k not in used]:
        del schedules[key]


def _rateless(problem: ProblemSpec) -> ProblemSpec:
    modules = {m: spec.model_copy(update={"rate": 1.0}) for m, spec in problem.modules.items()}
    return problem.model_copy(update={"modules": modules})


def _holds(problem: ProblemSpec, plan: Plan, hold: float) -> bool:
    """The plan still serves ``problem``: every module's planned rate (dummy included) covers the new rate,
    and no rate fell more than ``hold`` (a fraction) below the one the plan was solved for."""
    solved = (plan.model_extra or {}).get(RATES_KEY)
    if hold <= 0 or not isinstance(solved, dict) or set(solved) != set(problem.modules):
        return False
    for m, spec in problem.modules.items():
        mp = plan.modules.get(m)
        if mp is None:
            return False
        capacity = sum(g.machines * g.rate_per_machine for g in mp.groups)
        if spec.rate > capacity * (1 + 1e-9) or spec.rate < float(solved[m]) / (1 + hold):
            return False
    return True
