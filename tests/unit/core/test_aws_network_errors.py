"""A network-level AWS failure (botocore's ``ConnectionError`` / ``HTTPClientError``: endpoint
unreachable, read timeout, after the SDK's own retries; or no credentials) takes the same handled path as a service's error answer (``ClientError``):
every adapter raises its own ``...Error`` naming the endpoint, never the raw botocore exception, and
never an ``AttributeError`` where a handler reads a service error code. Tiny fake clients, no moto."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    ReadTimeoutError,
)

from control.errors import ControlError, RegistrationConflictError
from control.gc import GcConfig, sweep_orphan_queues
from control.queues import delete_queue, ensure_app_dlq
from control.registration.store import AppRecord, AppRegistry
from control.spec import RegistrationSpec
from control.state import ControlState, EpochTakenError, StateStore
from core.adapters._aws import AWS_ERRORS, error_code
from core.adapters.autoscaling import AutoScalingError, FleetGroups
from core.adapters.blobs import BlobStore
from core.adapters.config_items import ConfigItems
from core.adapters.config_store import ConfigStore
from core.adapters.metrics import CloudWatchMetrics
from core.adapters.plan_store import (
    HINTS,
    POINTER,
    InstanceStatus,
    Manifest,
    PlanStore,
    PlanStoreError,
    VersionConflictError,
    hint_key,
)
from core.adapters.queues import TaskQueues, queue_gone
from core.adapters.rates import ObservedRates, RateWindow
from core.adapters.results import FrameRecord, ResultStore, TaskRecord
from core.errors import BlobError, ConfigError, MetricsError, QueueError, ResultStoreError
from planner.models import AppModuleSpec
from planner.packing import FleetPlan, Instance
from profiles.errors import StoreError
from profiles.s3store import S3Store
from skinflint.report.cloudwatch import CloudWatchReader, ReportError
from tests.unit.core.test_queue_sends import message
from workers.lifecycle import AutoScalingCompleter, LifecycleError

if TYPE_CHECKING:
    from collections.abc import Callable

ENDPOINT = "http://x"
URL = "https://sqs.us-east-1.amazonaws.com/1/skinflint-traffic-detector-g0-m0"
TABLE = "skinflint-config"

#: what botocore raises when no answer came (each after the SDK's own retries)
NETWORK_ERRORS = [
    pytest.param(lambda: EndpointConnectionError(endpoint_url=ENDPOINT), id="endpoint-connection"),
    pytest.param(lambda: ReadTimeoutError(endpoint_url=ENDPOINT), id="read-timeout"),
]


class FakeClient:
    """A boto3 client: ``answers[op]`` is the response of ``op`` (a callable is called with the
    request's keyword arguments and may raise); every other call, and every paginator's first page,
    raises ``error`` as botocore does when the endpoint cannot be reached."""

    def __init__(self, error: Exception, answers: dict[str, Any] | None = None):
        self.error = error
        self.answers = answers or {}
        self.calls: list[str] = []

    def __getattr__(self, op: str) -> Callable[..., Any]:
        if op.startswith("_"):
            raise AttributeError(op)

        def call(**kwargs: Any) -> Any:
            self.calls.append(op)
            answer = self.answers.get(op, self.error)
            if isinstance(answer, BaseException):
                raise answer
            return answer(**kwargs) if callable(answer) else answer

        return call

    def get_paginator(self, op: str) -> Any:
        client = self

        class Paginator:
            def paginate(self, **kwargs: Any) -> Any:
                client.calls.append(op)
                raise client.error
                yield  # a generator: botocore's page iterator fails on the first page, as here

        return Paginator()


def service_error(code: str, op: str = "PutItem") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, op)


R0 = "0" * 30 + "00"  # a request id (the first frame of POST 000...0)


def task_record(
    task_id: str = "detector", children: tuple[str, ...] = (), recheck: bool = False
) -> TaskRecord:
    return TaskRecord(
        request_id=R0,
        task_id=task_id,
        module="detector",
        status="done",
        hardware="t4",
        emulated=True,
        enqueued_at=1.0,
        started_at=2.0,
        finished_at=3.0,
        batch_size=1,
        children=children,
        recheck=recheck,
    )


def doc_item(pk: str, doc: str) -> dict[str, Any]:
    """A plan-store item holding ``doc`` inline (as ``PlanStore._doc_items`` writes it)."""
    sha = hashlib.sha256(doc.encode()).hexdigest()
    return {"pk": {"S": pk}, "doc": {"S": doc}, "sha256": {"S": sha}, "parts": {"N": "0"}}


FLEET = FleetPlan(
    instances=[Instance(slot="t4/0", hardware="t4", shares=[])],
    prices={"t4": 0.5},
    occupancy_per_hour=0.1,
    dedicated_per_hour=0.5,
)


def _items_by_key(*items: dict[str, Any]) -> Callable[..., dict[str, Any]]:
    """BatchGetItem answering each requested key that ``items`` hold."""
    held = {item["pk"]["S"]: item for item in items}

    def batch_get_item(**kwargs: Any) -> dict[str, Any]:
        keys = [key["pk"]["S"] for key in kwargs["RequestItems"][TABLE]["Keys"]]
        return {"Responses": {TABLE: [held[key] for key in keys if key in held]}}

    return batch_get_item


def fleet_answers(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Version 3's fleet (one t4 slot) readable, no claim yet (the fleet, immutable, is read with
    BatchGetItem: core/adapters/plan_store.py _immutable_get)."""
    fleet = doc_item("plan#v00000003#fleet", FLEET.model_dump_json())
    return {
        "get_item": {"Item": fleet},
        "batch_get_item": _items_by_key(fleet),
        **(extra or {}),
    }


def claimed_answers() -> dict[str, Any]:
    """Version 3's fleet with slot t4/0 claimed by instance i-1."""
    claim = json.dumps({"slot": "t4/0", "instance_id": "i-1", "hardware": "t4", "at": 1.0})
    held = {"pk": {"S": "plan#v00000003#claim#t4/0"}, "doc": {"S": claim}, "holder": {"S": "i-1"}}
    fleet = doc_item("plan#v00000003#fleet", FLEET.model_dump_json())
    return fleet_answers({"batch_get_item": _items_by_key(fleet, held)})


def pointer_put_fails(error: Exception) -> Callable[..., Any]:
    """PutItem that writes every version item but cannot reach DynamoDB for the pointer."""

    def put_item(**kwargs: Any) -> dict[str, Any]:
        if kwargs["Item"]["pk"]["S"] == POINTER:
            raise error
        return {}

    return put_item


def record_answers() -> dict[str, Any]:
    rec = AppRecord(
        name="cams",
        revision=1,
        sha256="0" * 64,
        s3_key="apps/cams/r1.json",
        registered_at=1.0,
        slo_s=0.5,
        rate=1.0,
        modules=["det"],
    )
    return {"get_item": {"Item": {"doc": {"S": rec.model_dump_json()}}}}


SPEC = RegistrationSpec(name="cams", slo_s=0.5, rate=1.0, modules={"det": AppModuleSpec(model="det-net")})


def flush_one_metric(error: Exception) -> None:
    m = CloudWatchMetrics(FakeClient(error), "Skinflint", resolution_s=60.0)
    m.put("FramesAccepted", 1, App="traffic")
    m.flush()


#: (what is called, the error type its adapter raises); ``call(error)`` builds the fake client(s)
CASES: dict[str, tuple[Callable[[Exception], Any], type[Exception]]] = {
    # SQS
    "queues.send": (lambda e: TaskQueues(FakeClient(e)).send(URL, [message(0)]), QueueError),
    "queues.send_many": (
        lambda e: TaskQueues(FakeClient(e)).send_many({URL: [message(0)] * 11, URL + "-2": [message(0)]}),
        QueueError,
    ),
    "queues.receive": (lambda e: TaskQueues(FakeClient(e)).receive(URL, wait_s=0), QueueError),
    "queues.delete": (lambda e: TaskQueues(FakeClient(e)).delete(URL, ["rh-1"]), QueueError),
    "queues.release": (lambda e: TaskQueues(FakeClient(e)).release(URL, ["rh-1"]), QueueError),
    "queues.depth": (lambda e: TaskQueues(FakeClient(e)).depth(URL), QueueError),
    "control.ensure_app_dlq": (lambda e: ensure_app_dlq(FakeClient(e), "traffic"), ConfigError),
    "control.delete_queue": (lambda e: delete_queue(FakeClient(e), URL), QueueError),
    # the results table
    "results.create_frames": (
        lambda e: ResultStore(FakeClient(e), "results").create_frames(
            [FrameRecord(R0, "traffic", 1.0, 2.0, ("detector",))]
        ),
        ResultStoreError,
    ),
    "results.record_tasks": (
        lambda e: ResultStore(FakeClient(e), "results").record_tasks([task_record()]),
        ResultStoreError,
    ),
    "results.get_request": (
        lambda e: ResultStore(FakeClient(e), "results").get_request(R0),
        ResultStoreError,
    ),
    "results.recheck": (  # a redelivery reads its POST's records before it writes
        lambda e: ResultStore(FakeClient(e), "results").record_tasks([task_record(recheck=True)]),
        ResultStoreError,
    ),
    # the config table: keys, plan versions, control state, app registry
    "config.api_key_known": (
        lambda e: ConfigStore(FakeClient(e), TABLE).api_key_known("k"),
        ConfigError,
    ),
    "config.put_api_key": (
        lambda e: ConfigStore(FakeClient(e), TABLE).put_api_key("k", "tests"),
        ConfigError,
    ),
    "plans.deployment": (lambda e: PlanStore(FakeClient(e), TABLE).deployment(1, "traffic"), PlanStoreError),
    "plans.current": (lambda e: PlanStore(FakeClient(e), TABLE).current(), PlanStoreError),
    "plans.versions": (lambda e: PlanStore(FakeClient(e), TABLE).versions(), PlanStoreError),
    "plans.publish": (
        lambda e: PlanStore(
            FakeClient(e, {"get_item": {}, "update_item": {"Attributes": {"seq": {"N": "3"}}}}), TABLE
        ).publish([], FLEET, expected=None, activate_at=0.0, reason="test"),
        PlanStoreError,
    ),
    "plans.flip": (
        lambda e: PlanStore(
            FakeClient(
                e,
                {
                    "get_item": {},
                    "update_item": {"Attributes": {"seq": {"N": "3"}}},
                    "put_item": pointer_put_fails(e),
                },
            ),
            TABLE,
        ).publish([], FLEET, expected=None, activate_at=0.0, reason="test"),
        PlanStoreError,
    ),
    "plans.claim": (
        lambda e: PlanStore(FakeClient(e, fleet_answers()), TABLE).claim(3, "i-1", "t4"),
        PlanStoreError,
    ),
    "plans.release": (
        lambda e: PlanStore(FakeClient(e, claimed_answers()), TABLE).release(3, "i-1"),
        PlanStoreError,
    ),
    "plans.put_instance": (
        lambda e: PlanStore(FakeClient(e), TABLE).put_instance(
            InstanceStatus(instance_id="i-1", hardware="t4", at=1.0)
        ),
        PlanStoreError,
    ),
    "plans.delete_instance": (
        lambda e: PlanStore(FakeClient(e), TABLE).delete_instance("i-1"),
        PlanStoreError,
    ),
    "state.load": (lambda e: StateStore(ConfigItems(FakeClient(e), TABLE)).load(), ControlError),
    "state.save": (
        lambda e: StateStore(ConfigItems(FakeClient(e), TABLE)).save(ControlState(epoch=2), 1),
        ControlError,
    ),
    "registry.record": (
        lambda e: AppRegistry(ConfigItems(FakeClient(e), TABLE), BlobStore(FakeClient(e), "b")).record(
            "cams"
        ),
        ControlError,
    ),
    "registry.records": (
        lambda e: AppRegistry(ConfigItems(FakeClient(e), TABLE), BlobStore(FakeClient(e), "b")).records(),
        ControlError,
    ),
    "registry.spec": (
        lambda e: AppRegistry(
            ConfigItems(FakeClient(e, record_answers()), TABLE), BlobStore(FakeClient(e), "b")
        ).get("cams"),
        ControlError,
    ),
    "registry.put_spec": (
        lambda e: AppRegistry(
            ConfigItems(FakeClient(e, {"get_item": {}}), TABLE), BlobStore(FakeClient(e), "b")
        ).put(SPEC),
        ControlError,
    ),
    "registry.put_index": (
        lambda e: AppRegistry(
            ConfigItems(FakeClient(e, {"get_item": {}}), TABLE),
            BlobStore(FakeClient(e, {"put_object": {}}), "b"),
        ).put(SPEC),
        ControlError,
    ),
    "registry.request_replan": (
        lambda e: AppRegistry(
            ConfigItems(FakeClient(e), TABLE), BlobStore(FakeClient(e), "b")
        ).request_replan("cams"),
        ControlError,
    ),
    # S3
    "blobs.put": (lambda e: BlobStore(FakeClient(e), "b").put("k", b"x", "image/jpeg"), BlobError),
    "blobs.get": (lambda e: BlobStore(FakeClient(e), "b").get("k"), BlobError),
    "profiles.s3.get": (lambda e: S3Store(FakeClient(e), "b", "profiles").load_catalog(), StoreError),
    "profiles.s3.put": (lambda e: S3Store(FakeClient(e), "b").write("hardware.json", {}), StoreError),
    "profiles.s3.list": (lambda e: S3Store(FakeClient(e), "b").list_models(), StoreError),
    # CloudWatch and Auto Scaling
    "metrics.flush": (flush_one_metric, MetricsError),
    "rates.frame_rates": (
        lambda e: ObservedRates(FakeClient(e), "Skinflint").frame_rates(["traffic"], RateWindow(1e9, 60, 60)),
        MetricsError,
    ),
    "report.list_series": (
        lambda e: CloudWatchReader(FakeClient(e), "Skinflint").list_series("X"),
        ReportError,
    ),
    "autoscaling.states": (lambda e: FleetGroups(FakeClient(e), {"t4": "g-t4"}).states(), AutoScalingError),
    "autoscaling.set_desired": (
        lambda e: FleetGroups(FakeClient(e), {"t4": "g-t4"}).set_desired("t4", 2),
        AutoScalingError,
    ),
    "autoscaling.capacity_failures": (
        lambda e: FleetGroups(FakeClient(e), {"t4": "g-t4"}).capacity_failures("t4", 0.0),
        AutoScalingError,
    ),
    "lifecycle.complete": (
        lambda e: AutoScalingCompleter(FakeClient(e), "g-t4", "drain").complete("i-1"),
        LifecycleError,
    ),
}


@pytest.mark.parametrize("make_error", NETWORK_ERRORS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_network_failure_becomes_the_adapters_own_error(
    case: str, make_error: Callable[[], Exception]
) -> None:
    call, expected = CASES[case]
    error = make_error()
    with pytest.raises(expected) as raised:
        call(error)
    err = raised.value
    assert ENDPOINT in str(err), str(err)  # the reason names the endpoint that could not be reached
    assert not isinstance(err, AWS_ERRORS)  # wrapped, not the raw botocore error
    assert not isinstance(
        err, VersionConflictError | EpochTakenError | RegistrationConflictError
    )  # no code branch taken
    cause = err.__cause__
    while cause is not None and cause is not error:
        cause = cause.__cause__  # a profile-store error inside a control error, ...
    assert cause is error


@pytest.mark.parametrize("make_error", NETWORK_ERRORS)
def test_a_queue_error_from_the_network_names_its_queue_and_is_not_a_gone_queue(
    make_error: Callable[[], Exception],
) -> None:
    with pytest.raises(QueueError) as raised:
        TaskQueues(FakeClient(make_error())).receive(URL, wait_s=0)
    assert raised.value.queue_url == URL
    assert not queue_gone(raised.value)  # the worker keeps its share: it logs and receives again


@pytest.mark.parametrize("make_error", NETWORK_ERRORS)
def test_a_task_write_that_times_out_is_a_failure_not_a_repeat(make_error: Callable[[], Exception]) -> None:
    # no answer is no evidence the record was written: the batch fails and SQS redelivers it (a
    # second record of a task is counted once by readers)
    with pytest.raises(ResultStoreError, match="cannot write 1 task record"):
        ResultStore(FakeClient(make_error()), "results").record_tasks([task_record()])


def test_service_error_codes_still_take_their_branches() -> None:
    # the same handlers, answered by the service: their code-specific paths are unchanged
    taken = FakeClient(service_error("ConditionalCheckFailedException"), fleet_answers())
    assert PlanStore(taken, TABLE).claim(3, "i-2", "t4") is None  # another instance won the slot
    moved = FakeClient(service_error("ConditionalCheckFailedException"), claimed_answers())
    assert PlanStore(moved, TABLE).release(3, "i-1") == []
    with pytest.raises(EpochTakenError):
        StateStore(ConfigItems(FakeClient(service_error("ConditionalCheckFailedException")), TABLE)).save(
            ControlState(), 1
        )
    with pytest.raises(StoreError, match="hardware.json not found"):  # missing, not unreachable
        S3Store(FakeClient(service_error("NoSuchKey", "GetObject")), "b").load_catalog()
    gone = service_error("QueueDoesNotExist", "DeleteQueue")
    assert delete_queue(FakeClient(gone), URL) is False
    with pytest.raises(QueueError) as raised:
        TaskQueues(FakeClient(service_error("QueueDoesNotExist", "ReceiveMessage"))).receive(URL)
    assert queue_gone(raised.value)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (service_error("ConditionalCheckFailedException"), "ConditionalCheckFailedException"),
        (ClientError({"Error": {"Message": "no code"}}, "PutItem"), None),
        (EndpointConnectionError(endpoint_url=ENDPOINT), None),
        (ReadTimeoutError(endpoint_url=ENDPOINT), None),
        (ConnectionClosedError(endpoint_url=ENDPOINT), None),
        (ConnectTimeoutError(endpoint_url=ENDPOINT), None),
        (ValueError("not AWS"), None),
    ],
)
def test_error_code_is_the_services_code_or_none(error: BaseException, code: str | None) -> None:
    assert error_code(error) == code


def test_every_network_error_class_is_an_aws_error() -> None:
    for cls in (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError, ConnectTimeoutError):
        assert issubclass(cls, AWS_ERRORS)
    assert issubclass(ClientError, AWS_ERRORS)
    assert issubclass(NoCredentialsError, AWS_ERRORS)  # on EC2 credentials come over the network too


def test_a_bad_request_of_ours_is_not_taken_for_an_aws_failure() -> None:
    """A ``ParamValidationError`` (a bug in the call) or ``NoRegionError`` is not a failure of AWS: it
    propagates as it is, instead of being logged and retried forever like a network blip."""
    assert not issubclass(ParamValidationError, AWS_ERRORS)
    assert not issubclass(NoRegionError, AWS_ERRORS)
    sqs = FakeClient(ParamValidationError(report="Invalid type for parameter QueueUrl"))
    with pytest.raises(ParamValidationError):
        TaskQueues(sqs).receive(URL, wait_s=0)
    s3 = FakeClient(ParamValidationError(report="Invalid bucket name"))
    with pytest.raises(ParamValidationError):
        S3Store(s3, "b").load_catalog()


@pytest.mark.parametrize("make_error", NETWORK_ERRORS)
def test_a_profile_object_whose_body_stops_streaming_is_a_store_error(
    make_error: Callable[[], Exception],
) -> None:
    error = make_error()

    class Body:
        def read(self) -> bytes:
            raise error

    s3 = FakeClient(error, {"get_object": {"Body": Body()}})
    with pytest.raises(StoreError, match="hardware.json"):
        S3Store(s3, "b").load_catalog()


@pytest.mark.parametrize("make_error", NETWORK_ERRORS)
def test_best_effort_calls_log_and_go_on(
    make_error: Callable[[], Exception], caplog: pytest.LogCaptureFixture
) -> None:
    from front.admin import _planner_invoker

    # starting the planner at once is a shortcut: the next scheduled epoch plans the app anyway
    caplog.set_level(logging.WARNING, logger="skinflint.front")
    _planner_invoker(FakeClient(make_error()), "planner")("cams")
    assert any("could not start the planner for cams" in r.getMessage() for r in caplog.records)
    # the orphan-queue sweep lists nothing when SQS is unreachable; the next epoch tries again
    sqs = FakeClient(make_error())
    assert sweep_orphan_queues(sqs, lambda _u: 0, set(), 5, GcConfig()) == []
    assert sqs.calls == ["list_queues"]


@pytest.mark.parametrize("make_error", NETWORK_ERRORS)
def test_an_activation_rewritten_is_not_reported_failed_when_its_manifest_item_cannot_be_read(
    make_error: Callable[[], Exception],
) -> None:
    """The pointer is rewritten (what the front and the instances act on); the version's manifest item
    only follows it, best effort: a failure to read that item must not turn a done rewrite into an
    error."""
    manifest = Manifest(version=3, created_at=0.0, activate_at=100.0, reason="test", previous=2, apps={})
    pointer = {"pk": {"S": POINTER}, "version": {"N": "3"}, "doc": {"S": manifest.model_dump_json()}}
    error = make_error()

    def get_item(**kw: Any) -> Any:
        if kw["Key"]["pk"]["S"] == POINTER:
            return {"Item": pointer}
        raise error  # the manifest item: unreachable

    puts: list[str] = []

    def put_item(**kw: Any) -> Any:
        puts.append(kw["Item"]["pk"]["S"])
        return {}

    ddb = FakeClient(error, {"get_item": get_item, "put_item": put_item, "batch_write_item": {}})
    updated = PlanStore(ddb, TABLE).set_activation(manifest, 50.0, activation="ready")
    assert updated.activate_at == 50.0 and updated.activation == "ready"
    assert ddb.calls.count("batch_write_item") == 1  # the hints, pending, before the pointer
    assert [pk for pk in puts if not pk.startswith(f"{POINTER}#h")] == [POINTER]  # the pointer only
    assert sorted(pk for pk in puts if pk != POINTER) == [hint_key(i) for i in range(HINTS)]  # settled
