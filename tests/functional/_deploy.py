"""Deploy an app in tests as production does: a versioned plan in the plan store.

:func:`publish_app` takes what the control loop's epoch takes from the solver (an app and its
plan) and publishes it through the same code the epoch publishes with
(``control.deployments.app_change`` and ``build_deployment``, the per-version queues of
``control.queues``, :meth:`PlanStore.publish`); the other apps of the version in force are kept,
as the epoch keeps the apps it did not plan again. The fleet puts every planned machine on an
instance of its own (the packing of shares that share no instance), so an instance agent that
claims a slot serves exactly one machine. The assignments are those the instance agent derives
from its slot (``workers.shares.assignment_for``), for tests that run one share's worker
directly."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from control.deployments import app_change, build_deployment
from control.queues import create_module_queues, ensure_app_dlq, ensure_results_queue
from control.spec import RegistrationSpec
from planner.packing import FleetPlan, Instance, plan_shares
from workers.shares import ModelResolver, assignment_for

if TYPE_CHECKING:
    from collections.abc import Mapping

    from core.adapters.plan_store import Manifest, PlanStore
    from core.schema import Assignment, Deployment
    from planner.models import AppSpec, ModulePlan, Plan

__all__ = ["Published", "dedicated_fleet", "publish_app"]

#: no ONNX files here: every share runs emulated, as the tests' plans emulate their hardware
_NO_MODELS = str(Path(__file__).parent / "no-models")


@dataclass
class Published:
    """One app published in a new plan version."""

    manifest: Manifest
    deployment: Deployment  # the app's deployment as stored (stamped with the version)
    fleet: FleetPlan
    assignments: list[Assignment]  # one per planned machine (share), as its instance agent builds it
    dlq: str  # the app's dead-letter queue URL


def dedicated_fleet(app: str, plan: Plan, prices: Mapping[str, float] | None = None) -> FleetPlan:
    """Every planned machine of ``plan`` on an instance of its own, slots ``<hardware>/<i>`` in the
    plan's module order (``prices``: hardware -> $/h, default 1)."""
    shares = plan_shares(app, plan)
    price = {s.hardware: float((prices or {}).get(s.hardware, 1.0)) for s in shares}
    counter: dict[str, int] = {}
    instances: list[Instance] = []
    for share in shares:
        index = counter[share.hardware] = counter.get(share.hardware, -1) + 1
        instances.append(Instance(slot=f"{share.hardware}/{index}", hardware=share.hardware, shares=[share]))
    return FleetPlan(
        instances=instances,
        prices=price,
        occupancy_per_hour=sum(price[s.hardware] * s.occupancy for s in shares),
        dedicated_per_hour=sum(price[s.hardware] for s in shares),
    )


def publish_app(
    plans: PlanStore,
    sqs: Any,
    app: AppSpec,
    plan: Plan,
    frame_rate: float,
    *,
    slo_s: float | None = None,
    emulated_hardware: list[str] | None = None,
    overhead_s: float = 0.0,
    origin_s: float | None = None,
    activate_at: float | None = None,
    visibility_timeout_s: int = 30,
    prices: Mapping[str, float] | None = None,
    results: str = "pull",
) -> Published:
    """Publish ``app`` planned as ``plan`` at ``frame_rate`` in a new version (the app's
    ``slo_s`` unless given; schedule origin ``origin_s``, default now; active from ``activate_at``,
    default now) and return it."""
    now = time.time()
    current = plans.current()
    in_force = plans.deployments(current.version) if current is not None else {}
    spec = RegistrationSpec(
        name=app.name,
        slo_s=app.slo_s if slo_s is None else slo_s,
        rate=frame_rate,
        modules=app.modules,
        edges=app.edges,
        results=results,
    )
    emulated = sorted(set(emulated_hardware or []))
    previous = in_force.get(app.name)
    change = app_change(spec, plan, frame_rate, previous, emulated=emulated, overhead_s=overhead_s)
    version = plans.reserve_version()
    dlq_url, dlq_arn = ensure_app_dlq(sqs, app.name)

    def make_queues(module: str, module_plan: ModulePlan) -> dict[str, str]:
        return create_module_queues(
            sqs,
            app.name,
            module,
            module_plan,
            dlq_arn=dlq_arn,
            version=version,
            visibility_timeout_s=visibility_timeout_s,
        )

    deployment = build_deployment(
        spec,
        plan,
        frame_rate,
        previous,
        change,
        version=version,
        now=now if origin_s is None else origin_s,
        make_queues=make_queues,
        emulated=emulated,
        overhead_s=overhead_s,
        make_results_queue=lambda: ensure_results_queue(sqs, app.name, dlq_arn=dlq_arn),
    )
    fleet = dedicated_fleet(app.name, plan, prices)
    kept = [d for name, d in sorted(in_force.items()) if name != app.name]
    old = plans.fleet(current.version) if current is not None else None
    if old is not None:  # the apps not planned again keep their slots, as the epoch keeps them
        fleet = _merged(old, app.name, fleet)
    manifest = plans.publish(
        [*kept, deployment],
        fleet,
        expected=current.version if current is not None else None,
        activate_at=now if activate_at is None else activate_at,
        reason="test",
        version=version,
        created_at=now,
        app_meta={app.name: {"changed": change.changed_modules}},
    )
    stored = plans.deployment(manifest.version, app.name)
    assert stored is not None
    resolve = ModelResolver(lambda _app: app, lambda _model: [], _NO_MODELS)
    assignments = [
        assignment_for(share, stored, f"i-{inst.slot.replace('/', '-')}", resolve)
        for inst in fleet.instances
        for share in inst.shares
        if share.app == app.name
    ]
    return Published(manifest, stored, fleet, assignments, dlq_url)


def _merged(old: FleetPlan, app: str, fleet: FleetPlan) -> FleetPlan:
    """The instances of ``old`` that serve other apps than ``app``, then ``fleet``'s (numbered past
    them)."""
    others = [i for i in old.instances if all(s.app != app for s in i.shares)]
    taken: dict[str, int] = {}
    for inst in others:
        hw, _, index = str(inst.slot).partition("/")
        taken[hw] = max(taken.get(hw, -1), int(index))
    moved = []
    for inst in fleet.instances:
        hw, _, index = str(inst.slot).partition("/")
        moved.append(inst.model_copy(update={"slot": f"{hw}/{taken.get(hw, -1) + 1 + int(index)}"}))
    return FleetPlan(
        instances=[*others, *moved],
        prices={**old.prices, **fleet.prices},
        occupancy_per_hour=fleet.occupancy_per_hour
        + sum(old.prices[i.hardware] * i.occupancy for i in others),
        dedicated_per_hour=fleet.dedicated_per_hour + sum(old.prices[i.hardware] for i in others),
    )
