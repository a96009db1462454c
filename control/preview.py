"""An app planned at a given frame rate exactly as the control loop's first epoch would plan it, with
no stack running (``skinflint plan APP --rate R``): the spec checked as a registration checks it, the
rate through the forecast's headroom (:func:`~control.registration.checks.first_plan_rate`), the
problem the epoch builds (:func:`~control.problems.app_problem`: hop overhead, usable hardware), the
epoch's dispatch-aware solve (:func:`~control.planning.dispatch_solver`) and its packing onto whole
instances (:func:`planner.fleet.plan_fleet`). Pure: the caller passes the catalog and the profiles.

With an :class:`AllInSpec` the preview also prices the data plane at the planned rates
(:mod:`profiles.allin`, docs/cost.md): fleet, data plane and all-in $/h and $ per million frames. With
``fold`` the plan minimises the whole bill: the data plane's per-batch requests (receive, delete, child
sends, result records) scale with rate / batch, so the preview plans the app once per candidate
smallest batch (every module's configurations limited to batches of at least 1, 2, 4 ... ) and keeps
the plan whose fleet + data plane is the least (:func:`reprice`). The planner's search is not
changed: a price per batch cannot be folded into a configuration's machine price exactly (a machine's
requests scale with the rate it carries, not with its throughput), so the choice is made here."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import planner.fleet
from control.config import ControlConfig
from control.errors import ControlError
from control.objective import batch_floors
from control.planning import dispatch_solver
from control.problems import app_problem
from control.registration.checks import first_plan_rate
from control.registration.validate import validate_spec
from profiles.allin import data_plane_bill, with_results, workload_from_plan

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from control.spec import RegistrationSpec
    from planner.models import HardwareSpec, Plan, ProblemSpec, ProfileEntry
    from planner.packing import FleetPlan
    from profiles.allin import DataPlaneBill, DataPlanePolicy, Workload
    from profiles.aws_prices import AwsPrices

__all__ = ["AllInSpec", "AppPreview", "FloorPlan", "preview_app", "reprice"]


@dataclass(frozen=True)
class AllInSpec:
    """Price the data plane too: its design ``policy``, ``frame_kb`` KB frames, ``frames_per_post``
    frames per POST, at ``prices``; ``fold``: the plan minimises fleet + per-batch data-plane $/h."""

    policy: DataPlanePolicy
    prices: AwsPrices
    frame_kb: float = 8.0
    frames_per_post: int = 1
    fold: bool = False


@dataclass(frozen=True)
class FloorPlan:
    """The app planned with every module's batch at least ``min_batch`` (None: it does not plan)."""

    min_batch: int
    problem: ProblemSpec
    plan: Plan | None
    fleet: FleetPlan | None
    error: str | None = None


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
    all_in: AllInSpec | None = None
    data_plane: DataPlaneBill | None = None
    #: with an all-in objective: each smallest batch tried, its fleet, data plane and all-in $/h
    candidates: tuple[dict[str, Any], ...] = ()
    #: the plans :func:`reprice` chooses among (the first: the plan without the data plane)
    floor_plans: tuple[FloorPlan, ...] = ()

    @property
    def fleet_per_hour(self) -> float:
        """$/h of the packed fleet (whole instances)."""
        return self.fleet.billed_per_hour

    def per_million_frames(self, usd_per_hour: float) -> float:
        """``usd_per_hour`` spread over the frames of an hour at the offered rate (headroom unbilled)."""
        return usd_per_hour / (self.frame_rate * 3600) * 1e6

    def all_in_summary(self) -> dict[str, Any]:
        """The all-in keys of the JSON: fleet, data plane (itemised), all-in $/h and $ per million frames."""
        if self.all_in is None or self.data_plane is None:
            return {}
        bill = self.data_plane
        data = bill.total_per_hour
        total = self.fleet_per_hour + data
        return {
            "data_plane_policy": bill.policy,
            "frame_kb": self.all_in.frame_kb,
            "frames_per_post": self.all_in.frames_per_post,
            "objective_all_in": self.all_in.fold,
            # what all_in_per_hour covers: the fleet plus the data plane's AWS list prices
            "all_in_scope": "EC2 fleet + the data plane (API, WAF, Lambda, SQS, DynamoDB, S3, logs and "
            "metrics, fixed monthly costs) at the planned rates; GET polls of results are not included",
            "fleet_per_hour": round(self.fleet_per_hour, 6),
            "data_plane_per_hour": round(data, 6),
            "all_in_per_hour": round(total, 6),
            "fleet_per_million_frames": round(self.per_million_frames(self.fleet_per_hour), 6),
            "data_plane_per_million_frames": round(self.per_million_frames(data), 6),
            "all_in_per_million_frames": round(self.per_million_frames(total), 6),
            "batch_floor_candidates": list(self.candidates),
            "data_plane": bill.itemised(),
            "data_plane_units_per_frame": bill.units_per_frame,
            "data_plane_prices": {
                "label": self.all_in.prices.label,
                "source": self.all_in.prices.source,
                "entries": bill.prices,
            },
        }

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
            **self.all_in_summary(),
        }


def preview_app(
    doc: Mapping[str, Any],
    frame_rate: float,
    *,
    catalog: Mapping[str, HardwareSpec],
    stored_profile: Callable[[str], list[ProfileEntry] | None],
    config: ControlConfig | None = None,
    all_in: AllInSpec | None = None,
) -> AppPreview:
    """Plan the app of spec ``doc`` (a registration spec; its ``rate`` is replaced by ``frame_rate``)
    at ``frame_rate`` frames/s as the control loop's first epoch would. Raises
    :class:`~control.errors.RegistrationError` for a bad spec, :class:`ControlError` for a bad rate
    or a problem that cannot be planned. With ``all_in`` the data plane is priced too (and, with its
    ``fold``, in the objective)."""
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
        problem = app_problem(
            spec,
            planned,
            catalog,
            None,
            config.hop_overhead_s + config.batch_overhead_s,
            derived_margin=config.derived_margin,
        )
    except ValueError as exc:
        raise ControlError(f"{spec.name}: {str(exc).splitlines()[0]}") from exc
    if all_in is not None and all_in.fold:  # the whole bill in the objective: a plan per batch floor
        floors = _floor_plans(spec, problem, config, frame_rate, planned)
    else:
        floors = (FloorPlan(1, problem, *_solve(spec, problem, config, frame_rate, planned)),)
    settings = {
        "headroom": config.headroom,
        "hop_overhead_s": config.hop_overhead_s,
        "batch_overhead_s": config.batch_overhead_s,
        "child_headroom": config.child_headroom,
        "policy": config.policy,
        "machine_caps": dict(config.machine_caps),
    }
    base = floors[0]
    assert base.plan is not None and base.fleet is not None  # floor 1 plans or _floor_plans raised
    preview = AppPreview(
        spec=spec,
        frame_rate=float(frame_rate),
        planned_rate=planned,
        settings=settings,
        problem=base.problem,
        plan=base.plan,
        fleet=base.fleet,
        floor_plans=floors,
    )
    if all_in is None:
        return preview
    # an app whose results are pushed pays for its results queue, not for records in the table
    return reprice(preview, replace(all_in, policy=with_results(all_in.policy, spec.results)))


def reprice(preview: AppPreview, all_in: AllInSpec) -> AppPreview:
    """``preview`` priced all-in with ``all_in``: the plan without the data plane in the objective (the
    first of its floor plans), or with ``all_in.fold`` the floor plan of least fleet + data plane. A
    preview made without ``fold`` has one floor plan. No solving: the bench prices one preview several
    ways."""
    rows: list[dict[str, Any]] = []
    best: tuple[float, FloorPlan, DataPlaneBill] | None = None
    for floor in preview.floor_plans if all_in.fold else preview.floor_plans[:1]:
        if floor.plan is None or floor.fleet is None:
            rows.append({"min_batch": floor.min_batch, "planned": False, "why": floor.error})
            continue
        workload = _workload(
            preview.spec, floor.plan, floor.fleet, preview.frame_rate, preview.planned_rate, all_in
        )
        bill = data_plane_bill(all_in.policy, workload, all_in.prices)
        total = floor.fleet.billed_per_hour + bill.total_per_hour
        rows.append(
            {
                "min_batch": floor.min_batch,
                "planned": True,
                "fleet_per_hour": round(floor.fleet.billed_per_hour, 6),
                "data_plane_per_hour": round(bill.total_per_hour, 6),
                "all_in_per_hour": round(total, 6),
            }
        )
        if best is None or total < best[0] - 1e-9:  # ties: the smaller floor
            best = (total, floor, bill)
    assert best is not None  # the first floor plan always plans
    _, chosen, bill = best
    for row in rows:
        row["chosen"] = row["min_batch"] == chosen.min_batch
    assert chosen.plan is not None and chosen.fleet is not None
    return replace(
        preview,
        problem=chosen.problem,
        plan=chosen.plan,
        fleet=chosen.fleet,
        all_in=all_in,
        data_plane=bill,
        candidates=tuple(rows) if all_in.fold else (),
    )


def _solve(
    spec: RegistrationSpec, problem: ProblemSpec, config: ControlConfig, frame_rate: float, planned: float
) -> tuple[Plan, FleetPlan]:
    """The epoch's dispatch-aware solve and packing of ``problem``."""
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
    return result.plans[spec.name], result.fleet


def _workload(
    spec: RegistrationSpec, plan: Plan, fleet: FleetPlan, frame_rate: float, planned: float, all_in: AllInSpec
) -> Workload:
    """What the data plane carries at the offered ``frame_rate``: each module's planned rate scaled from
    the planned (headroom) rate, its groups' batches, the app's fan-outs, the fleet's instances."""
    scale = frame_rate / planned
    modules = {}
    for name, module in plan.modules.items():
        rate = float((module.model_extra or {}).get("rate") or 0.0) * scale
        groups = [(g.batch, g.machines * g.rate_per_machine) for g in module.groups]
        modules[name] = (rate, groups)
    return workload_from_plan(
        modules,
        list(spec.edges),
        frame_rate=frame_rate,
        frame_kb=all_in.frame_kb,
        frames_per_post=all_in.frames_per_post,
        instances=sum(fleet.counts().values()),
    )


def _floor_plans(
    spec: RegistrationSpec, problem: ProblemSpec, config: ControlConfig, frame_rate: float, planned: float
) -> tuple[FloorPlan, ...]:
    """A plan per batch floor (:func:`control.objective.batch_floors`). Floor 1 is the plain plan: its
    failure raises :class:`ControlError`; a larger floor's failure (too large a batch for the SLO) is
    recorded."""
    out = [FloorPlan(1, problem, *_solve(spec, problem, config, frame_rate, planned))]
    for floor, limited in batch_floors(problem):
        try:
            out.append(FloorPlan(floor, limited, *_solve(spec, limited, config, frame_rate, planned)))
        except ControlError as exc:
            out.append(FloorPlan(floor, limited, None, None, str(exc)))
    return tuple(out)
