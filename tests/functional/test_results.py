"""The results table against moto: the idempotency gate, completion, and GET's reads by key."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from core.adapters._ddb import from_item
from core.adapters.metrics import MemoryMetrics
from core.adapters.outcomes import FrameOutcomes
from core.adapters.results import (
    EXPIRES_AT,
    FrameRecord,
    ResultStore,
    TaskRecord,
    _completion,
    _task_out,
)
from core.errors import ResultStoreError
from core.schema import ResultOut
from front.app import create_app
from front.service import FrontService
from tests.functional.conftest import API_KEY

pytestmark = pytest.mark.functional


def rec(task_id: str, children: tuple[str, ...] = (), status: str = "done") -> TaskRecord:
    return TaskRecord(
        request_id="r1", task_id=task_id, module=task_id.rsplit("/", 1)[-1].split(".", 1)[0], status=status,
        hardware="t4", emulated=True, enqueued_at=1.0, started_at=1.1, finished_at=1.2, batch_size=1,
        children=children, output_json='{"ok":1}',
    )  # fmt: skip


CARS = ("detector/car.0", "detector/car.1")
RID = "0123456789abcdef0123456789abcdef"  # a request id the front accepts (uuid4().hex)
AUTH = {"x-api-key": API_KEY}


@pytest.fixture
def client(stack):
    from fastapi.testclient import TestClient

    svc = FrontService(
        config=stack.cfg, store=stack.store, plans=stack.plans, results=stack.results, queues=stack.queues,
        blobs=stack.blobs, metrics=stack.metrics,
    )  # fmt: skip
    return TestClient(create_app(lambda: svc))


def test_a_frame_is_done_when_every_task_reachable_from_its_roots_is_recorded(stack):
    # GIVEN a frame with one root whose detector task forwards two cars
    stack.results.create_frames([FrameRecord("r1", "traffic", 1.0, 3.0, roots=("detector",))])
    assert stack.results.get_request("r1").status == "queued"
    fresh, repeats = stack.results.record_tasks([rec("detector", children=CARS)])
    assert (len(fresh), len(repeats)) == (1, 0)
    assert stack.results.get_request("r1").status == "queued"
    stack.results.record_tasks([rec("detector/car.0")])
    assert stack.results.get_request("r1").status == "queued"  # car.1 still missing
    # WHEN the detector is redelivered and car.1 arrives
    fresh, repeats = stack.results.record_tasks([rec("detector", children=CARS)])
    assert (len(fresh), len(repeats)) == (0, 1)  # not recorded twice
    stack.results.record_tasks([rec("detector/car.1")])
    # THEN the frame is done with its three task items
    out = stack.results.get_request("r1")
    assert out.status == "done"
    assert sorted(t.task_id for t in out.tasks) == ["detector", *CARS]
    assert out.latency_s is not None


def test_a_frame_with_a_dropped_task_reads_as_dropped(stack):
    stack.results.create_frames([FrameRecord("r1", "traffic", 1.0, 3.0, roots=("detector",))])
    stack.results.record_tasks([rec("detector", status="dropped")])
    assert stack.results.get_request("r1").status == "dropped"


# -- GET reads by key ---------------------------------------------------------------------------------


class KeyReadsOnly:
    """The DynamoDB client, except that Query and Scan fail (moto answers both by scanning the whole
    table) and BatchGetItem calls are counted; ``unprocess_first`` calls leave every key unprocessed."""

    def __init__(self, real: Any, unprocess_first: int = 0) -> None:
        self._real = real
        self.batch_gets: list[int] = []  # keys asked for, per call
        self._unprocess = unprocess_first

    def __getattr__(self, name: str) -> Any:
        if name in ("query", "scan"):
            raise AssertionError(f"{name} on the results table: read by key")
        return getattr(self._real, name)

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        ((table, want),) = RequestItems.items()
        self.batch_gets.append(len(want["Keys"]))
        if self._unprocess:
            self._unprocess -= 1
            return {"Responses": {table: []}, "UnprocessedKeys": RequestItems}
        return self._real.batch_get_item(RequestItems=RequestItems)


def partition_read(stack: Any, request_id: str) -> ResultOut | None:
    """What GET answered when it read the request's whole partition (one Query): the reference."""
    page = stack.ddb.query(
        TableName=stack.cfg.results_table,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": request_id}},
        ConsistentRead=True,
    )
    items = [from_item(i) for i in page["Items"]]
    frame = next((i for i in items if i["sk"] == "frame"), None)
    if frame is None:
        return None
    tasks = {i["sk"].removeprefix("task#"): i for i in items if i["sk"].startswith("task#")}
    status, finished = _completion(frame, tasks)
    return ResultOut(
        request_id=request_id,
        app=frame["app"],
        status=status,
        accepted_at=frame["accepted_at"],
        deadline=frame["deadline"],
        finished_at=finished,
        latency_s=(finished - frame["accepted_at"]) if finished is not None else None,
        tasks=sorted((_task_out(i) for i in tasks.values()), key=lambda t: (t.started_at, t.task_id)),
    )


def task(
    rid: str, task_id: str, children: tuple[str, ...] = (), status: str = "done", t: float = 1.1
) -> TaskRecord:
    return TaskRecord(
        request_id=rid, task_id=task_id, module=task_id.rsplit("/", 1)[-1].split(".", 1)[0], status=status,
        hardware="t4", emulated=True, enqueued_at=t - 0.1, started_at=t, finished_at=t + 0.1, batch_size=2,
        children=children, output_json=None if status == "dropped" else '{"boxes":[[1,2,3,4]]}',
        reason="deadline" if status == "dropped" else None,
    )  # fmt: skip


def test_get_reads_by_key_one_batch_per_level_and_answers_as_the_partition_read(stack):
    # GIVEN frames of a three-level DAG (detector -> 2 cars -> a plate each; and a face root) in
    # every state, among other frames' items and an outcome item (which GET ignores)
    s = stack.results
    s.create_frames(
        [FrameRecord(r, "traffic", 1.0, 3.0, roots=("detector", "face")) for r in ("done", "part", "drop")]
        + [FrameRecord("bare", "traffic", 1.0, 3.0, roots=())]
        + [FrameRecord(f"other{i}", "traffic", 1.0, 3.0, roots=("detector",)) for i in range(30)]
    )
    cars = ("detector/car.0", "detector/car.1")
    for rid in ("done", "part", "drop"):
        s.record_tasks(
            [
                task(rid, "detector", cars, t=1.1),
                task(rid, "face", t=1.2),
                task(rid, cars[0], ("detector/car.0/plate.0",), t=1.3),
            ]
        )
    s.record_tasks(
        [
            task("done", cars[1], ("detector/car.1/plate.0",), t=1.3),
            task("done", "detector/car.0/plate.0", t=1.5),
            task("done", "detector/car.1/plate.0", t=1.4),
        ]
    )
    s.record_tasks([task("part", "detector/car.0/plate.0", t=1.5)])  # car.1 not recorded yet
    s.record_tasks(
        [task("drop", cars[1], status="dropped", t=1.3), task("drop", "detector/car.0/plate.0", t=1.5)]
    )
    s.record_tasks([task(f"other{i}", "detector") for i in range(30)])
    stack.ddb.put_item(TableName=stack.cfg.results_table, Item={"pk": {"S": "done"}, "sk": {"S": "outcome"}})
    keyed = KeyReadsOnly(stack.ddb)
    store = ResultStore(keyed, stack.cfg.results_table)
    # WHEN each is read
    got = {rid: store.get_request(rid) for rid in ("done", "part", "drop", "bare", "nope")}
    # THEN the answers are those of the partition read, field for field
    for rid, out in got.items():
        assert out == partition_read(stack, rid), rid
    assert got["nope"] is None and got["bare"].status == "queued"  # type: ignore[union-attr]
    assert (got["done"].status, len(got["done"].tasks)) == ("done", 6)  # type: ignore[union-attr]
    assert (got["part"].status, len(got["part"].tasks)) == ("queued", 4)  # type: ignore[union-attr]
    assert got["drop"].status == "dropped"  # type: ignore[union-attr]
    # by key: the frame, then one BatchGetItem per level of the DAG (2 roots, 2 cars, 2 plates)
    assert keyed.batch_gets == [1, 2, 2, 2] + [1, 2, 2, 1] + [1, 2, 2, 1] + [1] + [1]


def test_get_reads_a_wide_level_in_batches_of_100_and_retries_unprocessed_keys(stack):
    # GIVEN a detector task with 150 children, all recorded
    kids = tuple(f"detector/car.{k}" for k in range(150))
    stack.results.create_frames([FrameRecord("wide", "traffic", 1.0, 3.0, roots=("detector",))])
    stack.results.record_tasks([task("wide", "detector", kids)] + [task("wide", k, t=1.3) for k in kids])
    # WHEN DynamoDB leaves the first request's keys unprocessed
    keyed = KeyReadsOnly(stack.ddb, unprocess_first=1)
    out = ResultStore(keyed, stack.cfg.results_table).get_request("wide")
    # THEN the frame is read again, the 150 children in two batches, and the answer is complete
    assert keyed.batch_gets == [1, 1, 1, 100, 50]
    assert out is not None and out.status == "done" and len(out.tasks) == 151
    assert out == partition_read(stack, "wide")


def test_a_failed_read_is_a_result_store_error(stack):
    class Broken(KeyReadsOnly):
        def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "down"}}, "BatchGetItem")

    with pytest.raises(ResultStoreError, match="cannot read request r1"):
        ResultStore(Broken(stack.ddb), stack.cfg.results_table).get_request("r1")


# -- retention ----------------------------------------------------------------------------------------


def test_every_item_of_a_request_expires_a_retention_after_its_write(stack):
    # GIVEN a store keeping items one day, and the table's TTL on the attribute the items carry
    ttl = stack.ddb.describe_time_to_live(TableName=stack.cfg.results_table)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", EXPIRES_AT)
    store = ResultStore(stack.ddb, stack.cfg.results_table, retention_s=86_400.0)
    # WHEN a frame, its task and its outcome claim are written
    before = time.time()
    store.create_frames([FrameRecord("r1", "traffic", 1.0, 3.0, roots=("detector",))])
    store.record_tasks([rec("detector")])
    outcomes = FrameOutcomes.for_results(store, MemoryMetrics(), background=False)
    assert outcomes is not None and outcomes.retention_s == 86_400.0
    outcomes.observe([rec("detector")])
    after = time.time()
    # THEN each item expires one day after it was written (whole seconds, rounded up)
    items = stack.ddb.query(
        TableName=stack.cfg.results_table,
        KeyConditionExpression="pk = :r",
        ExpressionAttributeValues={":r": {"S": "r1"}},
    )["Items"]
    assert sorted(i["sk"]["S"] for i in items) == ["frame", "outcome", "task#detector"]
    for item in items:
        assert before + 86_400 <= float(item[EXPIRES_AT]["N"]) <= math.ceil(after + 86_400)


def test_a_frame_past_its_expiry_reads_as_unknown_before_dynamodb_deletes_it(stack, client):
    # GIVEN a done frame whose items expired a second ago (DynamoDB deletes them within days)
    stack.results.create_frames([FrameRecord(RID, "traffic", 1.0, 3.0, roots=("detector",))])
    stack.results.record_tasks([replace(rec("detector"), request_id=RID)])
    assert client.get(f"/v1/requests/{RID}", headers=AUTH).json()["status"] == "done"
    stack.ddb.update_item(
        TableName=stack.cfg.results_table,
        Key={"pk": {"S": RID}, "sk": {"S": "frame"}},
        UpdateExpression="SET #e = :e",
        ExpressionAttributeNames={"#e": EXPIRES_AT},
        ExpressionAttributeValues={":e": {"N": str(int(time.time()) - 1)}},
    )
    # WHEN it is read THEN it is unknown, as it will be once deleted
    assert stack.results.get_request(RID) is None
    r = client.get(f"/v1/requests/{RID}", headers=AUTH)
    assert (r.status_code, r.json()["error"]) == (404, "unknown_request")
