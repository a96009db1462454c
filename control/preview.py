"""An app planned at a given frame rate exactly as the control loop's first epoch would plan it, with
no stack running (``skinflint plan APP --rate R``): the spec checked as a registration checks it, the
rate through the forecast's headroom (:func:`~control.registration.checks.first_plan_rate`), the
problem the epoch builds (:func:`~control.problems.app_problem`: hop overhead, usable hardware), the
epoch's dispatch-aware solve (:func:`~control.planning.dispatch_solver`) and its packing onto whole
instances (:func:`planner.fleet.plan_fleet`). Pure: the caller passes the catalog and the profiles."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import planner.fleet
from control.config import ControlConfig
from control.errors import ControlError
from control.planning import dispatch_solver
from control.problems import app_problem
from control.registration.checks import first_plan_rate
from control.registration.validate import validate_spec

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from control.spec import RegistrationSpec
    from planner.models import HardwareSpec, Plan, ProblemSpec, ProfileEntry
    from planner.packing import FleetPlan

__all__ = ["AppPreview", "preview_app"]


@dataclass(frozen=True)
class AppPreview:
    """What the control loop would run for one app at ``frame_rate``: the spec, the rate it plans for
    (headroom included), the problem, the plan and the packed fleet."""

    spec: RegistrationSpec
    frame_rate: float
    planned_rate: float
    settings: dict[str, Any]
    problem: ProblemSpec
    plan: Plan
    fleet: FleetPlan

    @property
    def fleet_per_hour(self) -> float:
        """$/h of the packed fleet (whole instances)."""
        return self.fleet.billed_per_hour

    def summary(self) -> dict[str, Any]:
        """The JSON the CLI prints: settings, fleet, $/h and each module's configuration and budget."""
        modules = {}
        for name, module in self.plan.modules.items():
            extra = module.model_extra or {}
            modules[name] = {
                "rate": extra.get("rate"),
                "dummy_rate": module.dummy_rate,
                "worst_case_latency_s": module.worst_case_latency_s,
                "latency_budget_s": module.latency_budget_s,
                "groups": [
                    {
                        "hardware": group.hardware,
                        "batch": group.batch,
                        "concurrency": group.concurrency,
                        "duration_s": group.duration_s,
                        "machines": group.machines,
                        "rate_per_machine": group.rate_per_machine,
                    }
                    for group in module.groups
                ],
            }
        return {
            "app": self.spec.name,
            "frame_rate": self.frame_rate,
            "planned_rate": self.planned_rate,
            "slo_s": self.spec.slo_s,
            "planning_slo_s": self.spec.planning_slo_s,
            "settings": self.settings,
            "fleet_per_hour": round(self.fleet_per_hour, 6),
            # what fleet_per_hour covers: the EC2 instances only, at the catalog's list prices
            "cost_scope": "EC2 fleet only (on-demand list prices); the data plane is not included",
            "price_sources": {
                hw: {
                    "price_per_hour": spec.price_per_hour,
                    "date": (spec.model_extra or {}).get("price_date"),
                    "source": (spec.model_extra or {}).get("price_source"),
                }
                for hw, spec in self.problem.hardware.items()
                if self.fleet.counts().get(hw)
            },
            "occupancy_per_hour": round(self.fleet.occupancy_per_hour, 6),
            "instances": self.fleet.counts(),
            "prices": self.fleet.prices,
            "plan_billed_per_hour": self.plan.billed_per_hour,
            "modules": modules,
        }


def preview_app(
    doc: Mapping[str, Any],
    frame_rate: float,
    *,
    catalog: Mapping[str, HardwareSpec],
    stored_profile: Callable[[str], list[ProfileEntry] | None],
    config: ControlConfig | None = None,
) -> AppPreview:
    """Plan the app of spec ``doc`` (a registration spec; its ``rate`` is replaced by ``frame_rate``)
    at ``frame_rate`` frames/s as the control loop's first epoch would. Raises
    :class:`~control.errors.RegistrationError` for a bad spec, :class:`ControlError` for a bad rate
    or a problem that cannot be planned."""
    if not (isinstance(frame_rate, int | float) and math.isfinite(frame_rate) and frame_rate > 0):
        raise ControlError(f"--rate must be a finite number of frames/s > 0, got {frame_rate}")
    config = config or ControlConfig()
    spec = validate_spec(
        {**doc, "rate": frame_rate},
        catalog=dict(catalog),
        stored_profile=stored_profile,
        check_feasible=False,
    )
    planned = first_plan_rate(spec, config.headroom)
    try:
        problem = app_problem(spec, planned, catalog, None, config.hop_overhead_s + config.batch_overhead_s)
    except ValueError as exc:
        raise ControlError(f"{spec.name}: {str(exc).splitlines()[0]}") from exc
    result = planner.fleet.plan_fleet(
        {spec.name: problem},
        policy=config.policy,
        solver=dispatch_solver(config),
    )
    if spec.name in result.failed:
        raise ControlError(
            f"{spec.name} cannot be planned at {frame_rate:g} frames/s "
            f"({planned:.4g} with headroom): {result.failed[spec.name]}"
        )
    settings = {
        "headroom": config.headroom,
        "hop_overhead_s": config.hop_overhead_s,
        "batch_overhead_s": config.batch_overhead_s,
        "child_headroom": config.child_headroom,
        "policy": config.policy,
        "machine_caps": dict(config.machine_caps),
    }
    return AppPreview(
        spec=spec,
        frame_rate=float(frame_rate),
        planned_rate=planned,
        settings=settings,
        problem=problem,
        plan=result.plans[spec.name],
        fleet=result.fleet,
    )
