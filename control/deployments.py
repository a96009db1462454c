"""A new version's deployments from the epoch's plans: what changed, and fresh queues only where a
module's plan changed (an unchanged module keeps its queues and the app its schedule origin, so
nothing in flight is disturbed)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.schema import SERVICE_CORRECTION_KEY as CORRECTION_KEY
from core.schema import Deployment
from planner.fleet import CARRIED_KEY

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from control.spec import RegistrationSpec
    from planner.models import ModulePlan, Plan

__all__ = ["AppChange", "app_change", "build_deployment", "changed_apps", "same_module_plan"]

_REL = 1e-9
# A plan that is otherwise unchanged is not re-published for a rate that moved by less than this
# (relative): the machines are the same, only the admission limit derived from the rate would move,
# and publishing a version every epoch for forecast jitter churns the front and the instances.
RATE_REPUBLISH_REL = 0.10


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_REL, abs_tol=1e-12)


def _rate_close(old: float, new: float, modules_changed: bool) -> bool:
    if modules_changed or old <= 0:
        return _close(old, new)
    return abs(new - old) <= RATE_REPUBLISH_REL * old


def same_module_plan(left: ModulePlan, right: ModulePlan) -> bool:
    """Equal machine groups (hardware, batch, concurrency, machines, rate, duration, hop) and budgets:
    the same dispatch schedule, so the same queues can carry it."""
    if len(left.groups) != len(right.groups) or not _close(left.latency_budget_s, right.latency_budget_s):
        return False
    return all(
        (left_group.hardware, left_group.batch, left_group.concurrency, left_group.machines)
        == (right_group.hardware, right_group.batch, right_group.concurrency, right_group.machines)
        and _close(left_group.rate_per_machine, right_group.rate_per_machine)
        and _close(left_group.duration_s, right_group.duration_s)
        and _close(left_group.overhead_s, right_group.overhead_s)
        for left_group, right_group in zip(left.groups, right.groups, strict=True)
    )


@dataclass
class AppChange:
    """What differs between an app's deployment in force and its new plan."""

    app: str
    changed_modules: list[str] = field(default_factory=list)  # need fresh queues
    other: list[str] = field(default_factory=list)  # slo, edges, rate, ... (queues kept)

    @property
    def changed(self) -> bool:
        return bool(self.changed_modules or self.other)


def app_change(
    spec: RegistrationSpec,
    plan: Plan,
    frame_rate: float,
    previous: Deployment | None,
    *,
    emulated: list[str],
    overhead_s: float,
) -> AppChange:
    if previous is None:
        return AppChange(spec.name, changed_modules=list(plan.modules), other=["new app"])
    out = AppChange(spec.name)
    for module, mp in plan.modules.items():
        old = previous.plan.modules.get(module)
        if old is None or not same_module_plan(old, mp):
            out.changed_modules.append(module)
    checks: list[tuple[str, bool]] = [
        ("slo", _close(previous.slo_s, spec.slo_s)),
        ("admission reserve", _close(previous.planning_slo_s or previous.slo_s, spec.planning_slo_s)),
        ("edges", [tuple(edge) for edge in previous.edges] == [tuple(edge) for edge in spec.edges]),
        ("modules removed", set(previous.plan.modules) <= set(plan.modules)),
        ("rate", _rate_close(previous.frame_rate, frame_rate, bool(out.changed_modules))),
        ("emulated hardware", sorted(previous.emulated_hardware) == sorted(emulated)),
        ("results", previous.results == spec.results),
        ("overhead", _close(previous.overhead_s, overhead_s)),
        # a plan carried over a problem change (planner.fleet.CARRIED_KEY) solved again, or newly carried:
        # written even when its machines are the same, or the next epoch would solve it again
        ("carried", _carried(previous.plan) == _carried(plan)),
    ]
    out.other = [name for name, same in checks if not same]
    return out


def _carried(plan: Plan) -> bool:
    return CARRIED_KEY in (plan.model_extra or {})


def build_deployment(
    spec: RegistrationSpec,
    plan: Plan,
    frame_rate: float,
    previous: Deployment | None,
    change: AppChange,
    *,
    version: int,
    now: float,
    make_queues: Callable[[str, ModulePlan], dict[str, str]],
    emulated: list[str],
    overhead_s: float,
    corrections: Mapping[str, float] | None = None,
    make_results_queue: Callable[[], str] | None = None,
) -> Deployment:
    """The app's deployment in ``version``: unchanged modules keep their module plan (exactly) and
    queues; ``make_queues(module, module_plan)`` creates the changed modules' queues. A changed
    module's plan records the service-time corrections its durations include
    (``service_correction_s``: hardware -> s; ``"module@hardware"`` keys of ``corrections``), so a
    worker emulating the hardware sleeps the profile's duration, not the correction. A push app
    (``spec.results``) gets its results queue from ``make_results_queue()`` (kept from ``previous``)."""
    corr = corrections or {}
    modules: dict[str, Any] = {}
    queues: dict[str, dict[str, str]] = {}
    for module, mp in plan.modules.items():
        if previous is not None and module not in change.changed_modules:
            modules[module] = previous.plan.modules[module]
            queues[module] = dict(previous.queues[module])
        else:
            mine = {
                key.split("@", 1)[1]: value for key, value in corr.items() if key.split("@", 1)[0] == module
            }
            modules[module] = mp.model_copy(update={CORRECTION_KEY: mine}) if mine else mp
            queues[module] = make_queues(module, mp)
    has_parent = {child for _, child, _ in spec.edges}
    results_queue = None
    if spec.results == "push":
        results_queue = previous.results_queue if previous is not None else None
        if results_queue is None:
            if make_results_queue is None:
                raise ValueError(f"{spec.name} pushes its results: a results queue is needed")
            results_queue = make_results_queue()
    return Deployment(
        app=spec.name,
        version=version,
        origin_s=previous.origin_s if previous is not None else now,
        slo_s=spec.slo_s,
        frame_rate=frame_rate,
        roots=[module for module in spec.modules if module not in has_parent],
        edges=list(spec.edges),
        plan=plan.model_copy(update={"modules": modules}),
        queues=queues,
        emulated_hardware=sorted(emulated),
        overhead_s=overhead_s,
        planning_slo_s=spec.planning_slo_s if spec.admission_reserve > 0 else None,
        results=spec.results,
        results_queue=results_queue,
    )


def changed_apps(changes: Mapping[str, AppChange]) -> dict[str, list[str]]:
    return {app: change.changed_modules + change.other for app, change in changes.items() if change.changed}
