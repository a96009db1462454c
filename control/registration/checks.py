"""The registration's feasibility checks, made as the epoch plans: the rate the first epoch plans a
new app for (its registered rate through the forecast, never below its floor), the same problem and
the same dispatch-aware solve (:func:`check_plannable`, whose plan is stored with the revision as its
*seed*: the first epoch that plans the app for the same problem takes it instead of solving again,
:func:`planner.fleet.plan_fleet`'s ``seeds``), and the planner settings both share
(:func:`planner_settings`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import planner.robust
from control.config import ControlConfig
from control.errors import RegistrationError
from control.problems import app_problem, usable_hardware
from planner.errors import PlannerError
from planner.fleet import seed_plan
from planner.scaling import forecast_rate

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from control.spec import RegistrationSpec
    from planner.models import HardwareSpec, Plan

__all__ = [
    "check_hardware_profiles",
    "check_plannable",
    "first_plan_rate",
    "floor_plan_rate",
    "planner_settings",
]


def planner_settings(control: ControlConfig | None = None) -> dict[str, Any]:
    """The planner settings a registration's feasibility check shares with the epoch, as keyword
    arguments of ``control.service.Registrar`` (and :func:`validate_spec`): the hop
    overhead, the forecast headroom, the child headroom and the solver policy. Read through
    :meth:`ControlConfig.from_env` (``SKINFLINT_HOP_OVERHEAD_S``, ``SKINFLINT_PLANNER_HEADROOM``,
    ``SKINFLINT_CHILD_HEADROOM``), the same parser the planner uses, unless ``control`` is given;
    a bad value raises ``ControlError`` as it does in the planner."""
    if control is None:
        control = ControlConfig.from_env()
    return {
        "overhead_s": control.hop_overhead_s + control.batch_overhead_s,
        "headroom": control.headroom,
        "child_headroom": control.child_headroom,
        "policy": control.policy,
    }


def floor_plan_rate(spec: RegistrationSpec, headroom: float) -> float:
    """The least frame rate an app is planned for: its floor (``min_rate``) through the forecast, with
    the same ``headroom`` as any observed rate. A floor is a rate the app can always send at; planned
    at exactly that rate, its windows would have no spare room, and frames of independent cameras
    arriving in one window would be shed (``slot_full``) at the floor itself."""
    return forecast_rate([spec.floor_rate], headroom=headroom)


def first_plan_rate(spec: RegistrationSpec, headroom: float) -> float:
    """The frame rate the first epoch plans a new app for: its registered rate through the forecast
    (``headroom``, quantised up), never below its floor's (:func:`floor_plan_rate`;
    control/epoch.py)."""
    return max(forecast_rate([spec.rate], headroom=headroom), floor_plan_rate(spec, headroom))


def check_plannable(
    spec: RegistrationSpec,
    catalog: Mapping[str, HardwareSpec],
    available: Iterable[str] | None,
    *,
    overhead_s: float,
    headroom: float = 0.0,
    child_headroom: float = 0.0,
    policy: str = "skinflint",
) -> Plan:
    """Raise :class:`RegistrationError` unless the epoch can plan ``spec``: the same problem
    (``app_problem``) at the same rate (:func:`first_plan_rate`) with the same solve
    (``planner.robust.solve_dispatchable``, billed objective) the epoch uses, so an app accepted
    here is not one the planner then reports as failed. Returns that plan as a seed
    (``planner.fleet.seed_plan``: it records the problem's digest, so an epoch takes it only for the
    same problem)."""
    rate = first_plan_rate(spec, headroom)
    try:
        problem = app_problem(spec, rate, catalog, available, overhead_s)
        plan = planner.robust.solve_dispatchable(
            problem, policy=policy, objective="billed", child_headroom=child_headroom
        )
    except (PlannerError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RegistrationError(
            [
                f"cannot be planned at {spec.rate:g} frames/s within slo_s {spec.slo_s:g}"
                + (
                    f" less its admission_reserve ({spec.planning_slo_s:.4g} s)"
                    if spec.admission_reserve > 0
                    else ""
                )
                + f": {first} "
                f"(checked as the planner plans it: {rate:.4g} frames/s with headroom, dispatch-aware)"
            ],
            spec.name,
        ) from exc
    return seed_plan(problem, plan, policy)


def check_hardware_profiles(
    spec: RegistrationSpec, catalog: Mapping[str, HardwareSpec], available: set[str] | None
) -> None:
    hw = usable_hardware(spec, catalog, available)
    problems: list[str] = []
    for name, mod in spec.modules.items():
        have = sorted({entry.hardware for entry in spec.profiles.get(mod.model, [])})
        if not set(have) & set(hw):
            problems.append(
                f"module {name!r} (model {mod.model}) has no profile on the usable hardware "
                f"({', '.join(hw) or 'none'}), profiled on: {', '.join(have) or 'nothing'}"
            )
    if problems:
        raise RegistrationError(problems, spec.name)
