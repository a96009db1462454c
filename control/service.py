"""Wiring of the control plane: a :class:`~control.epoch.Controller` from settings and
boto3 clients, and the dispatch of the planner function's events (schedule, app change, fleet
events). The Lambda handler (``functions/planner.py``), the local stack's epoch timer and
the tests all come through here.

Events: SQS ``Records`` (fleet events: lifecycle notices, Spot warnings); ``{"source":
"skinflint.backlog"}`` (the backlog check between epochs, which also activates a new version whose
slots are served); ``{"source": "skinflint.apps", "detail": {"app": ...}}`` (an app changed);
anything else (the EventBridge schedule, the local stack's timer) runs an epoch."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType

from control.epoch import Controller
from control.errors import ControlError
from control.registration.store import AppRegistry
from control.registration.validate import validate_registration
from control.state import StateStore
from core.adapters.autoscaling import FleetGroups
from core.adapters.blobs import BlobStore
from core.adapters.config_items import ConfigItems
from core.adapters.metrics import CloudWatchMetrics
from core.adapters.plan_store import InstanceStatus, PlanStore
from core.adapters.queue_admin import QueueAdmin
from core.adapters.queues import TaskQueues
from core.adapters.rates import HopDelays, ObservedRates, ServiceOverruns
from core.adapters.results import ResultStore
from core.adapters.usage import report_to
from core.clients import make_client
from core.errors import DataPlaneError, MetricsError
from profiles.errors import ProfilesError
from profiles.onsite import stored_entries
from profiles.s3store import S3Store
from profiles.store import PACKAGE_ROOT, LayeredStore, LocalStore, ProfileStore, cache_dir

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    from control.config import ControlConfig
    from control.registration.store import AppRecord
    from control.registration.validate import Registration
    from control.spec import RegistrationSpec
    from core.settings import DataPlaneConfig
    from planner.models import HardwareSpec, ProfileEntry

__all__ = [
    "APP_CHANGED",
    "BACKLOG_CHECK",
    "PROFILES_PREFIX",
    "Registrar",
    "build_controller",
    "handle_event",
    "load_catalog",
    "profile_store",
    "registry_and_state",
]

log = logging.getLogger("skinflint.control")

PROFILES_PREFIX = "profiles"  # S3 prefix of the profile store (catalog override, shared profiles)
APP_CHANGED = "skinflint.apps"  # event source of "an app was registered or changed"
BACKLOG_CHECK = "skinflint.backlog"  # event source of "check the task queues (and a waiting activation)"


def profile_store(s3: Any, bucket: str, local: bool = False) -> Any:
    """The profile store the control plane reads: S3 (``profiles/``) over the packaged data; with
    ``local`` the build cache too (the CLI on a developer's machine)."""
    layers: list[ProfileStore] = [S3Store(s3, bucket, PROFILES_PREFIX)]
    if local:
        layers.append(LocalStore(cache_dir()))
    layers.append(LocalStore(PACKAGE_ROOT))
    return LayeredStore(layers)


def load_catalog(s3: Any, bucket: str) -> dict[str, HardwareSpec]:
    """The hardware catalog: ``s3://bucket/profiles/hardware.json`` when present, else the packaged one."""
    try:
        return dict(profile_store(s3, bucket).load_catalog())
    except ProfilesError as exc:
        raise ControlError(f"cannot read the hardware catalog: {exc}") from exc


def registry_and_state(ddb: Any, s3: Any, table: str, bucket: str) -> tuple[AppRegistry, StateStore]:
    """The app registry and the control state on the config table ``table`` and the bucket
    ``bucket``, through their adapters on the given DynamoDB and S3 clients."""
    items = ConfigItems(ddb, table)
    return AppRegistry(items, BlobStore(s3, bucket)), StateStore(items)


def build_controller(
    data: DataPlaneConfig,
    control: ControlConfig,
    *,
    clients: Mapping[str, Any] | None = None,
    clock: Callable[[], float] = time.time,
) -> Controller:
    """A controller on ``data``'s resources. ``clients`` maps a service name (dynamodb, sqs, s3,
    cloudwatch, autoscaling) to a client; missing ones are made with :func:`make_client`, their
    requests counted as the ``control`` component's (core/adapters/usage.py; given ones are not)."""
    given = dict(clients or {})

    def client(name: str) -> Any:
        if name not in given:
            given[name] = make_client(name, data, "control")
        return given[name]

    ddb, s3, cw, sqs = client("dynamodb"), client("s3"), client("cloudwatch"), client("sqs")
    registry, states = registry_and_state(ddb, s3, data.config_table, data.bucket)
    return Controller(
        config=control,
        plans=PlanStore(ddb, data.config_table),
        registry=registry,
        states=states,
        rates=ObservedRates(cw, data.metrics_namespace, shed_cap=control.shed_demand_cap),
        overruns=ServiceOverruns(cw, data.metrics_namespace),
        hop_delays=HopDelays(cw, data.metrics_namespace),
        stored_profile=stored_entries(profile_store(s3, data.bucket)),  # measured on instances (#27)
        groups=FleetGroups(client("autoscaling"), control.asg_names),
        queues=QueueAdmin(sqs),
        depth=TaskQueues(sqs).depth_messages,  # messages: the backlog check converts (control/backlog.py)
        tasks=TaskQueues(sqs),
        results=ResultStore(ddb, data.results_table, data.results_retention_s),
        metrics=report_to(CloudWatchMetrics(cw, data.metrics_namespace), "control"),
        catalog=load_catalog(s3, data.bucket),
        clock=clock,
    )


def handle_event(controller: Controller, event: Mapping[str, Any]) -> dict[str, Any]:
    """One invocation: SQS fleet events (``Records``) are recorded; a backlog-check event runs
    :meth:`Controller.check_backlog`; anything else runs an epoch (an EventBridge schedule, an app
    change, the local stack's timer). Metrics are flushed."""
    try:
        if "Records" in event:
            return _fleet_events(controller, event["Records"])
        if event.get("source") == BACKLOG_CHECK:
            why = str(event.get("detail-type") or "backlog check")
            return controller.check_backlog(reason=why).as_json()
        if event.get("source") == APP_CHANGED:
            app = (event.get("detail") or {}).get("app", "?")
            return controller.run_epoch(reason=f"app changed: {app}").as_json()
        return controller.run_epoch(reason=str(event.get("detail-type") or "schedule")).as_json()
    finally:
        try:
            controller.metrics.flush()
        except MetricsError as exc:
            log.warning("metrics not sent: %s", exc)


def _instance_of(body: Mapping[str, Any]) -> tuple[str | None, str]:
    """(instance id, what happens) of an Auto Scaling lifecycle notice or a Spot interruption."""
    if body.get("Event") == "autoscaling:TEST_NOTIFICATION":
        return None, "test"
    if "EC2InstanceId" in body:
        return str(body["EC2InstanceId"]), str(body.get("LifecycleTransition", "lifecycle"))
    detail = body.get("detail") or {}
    if isinstance(detail, dict) and "instance-id" in detail:
        return str(detail["instance-id"]), str(body.get("detail-type", "event"))
    return None, "unknown"


def _fleet_events(controller: Controller, records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """An instance that terminates (lifecycle hook) or is interrupted (Spot) gives up its claims in
    the current and previous versions, so a replacement can take its slots at once; its heartbeat
    says ``draining``. A record that cannot be processed (a body that is not JSON, a failed AWS call)
    is reported for redelivery (Powertools' batch processor: the SQS partial batch response, even
    when every record failed); any other error fails the invocation (a bug: the whole batch is
    redelivered, the function's Errors metric counts it)."""
    released: dict[str, list[str]] = {}
    store = controller.plans

    def release(record: SQSRecord) -> None:
        try:
            body = json.loads(record.get("body") or "{}")
            instance, what = _instance_of(body)
            if instance is None:
                return
            cur = store.current()
            versions = [
                version for version in ((cur.version, cur.previous) if cur else ()) if version is not None
            ]
            released[instance] = [
                f"v{version}:{slot}" for version in versions for slot in store.release(version, instance)
            ]
            beat = store.instances().get(instance)
            if beat is not None:
                store.put_instance(
                    InstanceStatus(**{**beat.model_dump(), "state": "draining", "at": controller.clock()})
                )
            log.info("fleet event %s for %s: released %s", what, instance, released[instance])
        except (ValueError, DataPlaneError) as exc:
            log.warning("fleet event %s not processed: %s", record.get("messageId"), exc)
            raise

    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    with processor([dict(rec) for rec in records], release):
        processor.process()
    for _kind, exc, _trace in processor.exceptions:
        if exc is not None and not isinstance(exc, (ValueError, DataPlaneError)):
            raise exc
    return {**processor.response(), "released": released}


@dataclass
class Registrar:
    """Registers apps: validate (every problem listed), store the next revision, ask the planner to
    re-plan. The hardware the planner last saw (its worker groups) bounds what an app may use.
    ``invoke_planner(app)`` starts the planner at once (the deployed front invokes the Lambda);
    without it the next scheduled epoch picks the change up."""

    registry: AppRegistry
    states: StateStore
    catalog: Mapping[str, HardwareSpec]
    stored_profile: Callable[[str], list[ProfileEntry] | None]
    overhead_s: float = 0.05
    invoke_planner: Callable[[str], None] | None = None
    headroom: float = (
        0.1  # the planner's (ControlConfig.headroom): an app is checked at the rate it is planned for
    )
    child_headroom: float = 0.0  # ControlConfig.child_headroom
    policy: str = "skinflint"

    def validate(self, doc: Any) -> RegistrationSpec:
        """Every problem of ``doc``; feasibility as the epoch plans it (same rate with headroom,
        same dispatch-aware solve)."""
        return self._registration(doc).spec

    def _registration(self, doc: Any) -> Registration:
        available = list(self.states.load().asg_names) or None
        return validate_registration(
            doc,
            catalog=self.catalog,
            stored_profile=self.stored_profile,
            available=available,
            overhead_s=self.overhead_s,
            headroom=self.headroom,
            child_headroom=self.child_headroom,
            policy=self.policy,
        )

    def register(self, doc: Any, now: float | None = None) -> AppRecord:
        """Validate ``doc`` and store it with the plan its feasibility check solved (the first epoch
        takes that plan instead of solving again, when it plans the same problem)."""
        reg = self._registration(doc)
        spec = reg.spec
        record = self.registry.put(spec, now, seed=reg.seed)
        self.registry.request_replan(spec.name, now)
        if self.invoke_planner is not None:
            self.invoke_planner(spec.name)
        return record
