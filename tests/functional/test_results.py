"""The results table against moto: a POST's partition, records per batch and POST, completion by
weights, redeliveries counted once, and what the writes and reads cost."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from core.adapters.metrics import MemoryMetrics
from core.adapters.outcomes import FrameOutcomes
from core.adapters.results import DUE_SHARDS, EXPIRES_AT, FrameRecord, ResultStore, TaskRecord, post_key
from core.errors import ResultStoreError
from core.ids import due_bucket, due_minute, new_post_id, post_of, request_id
from front.app import create_app
from front.service import FrontService
from tests.functional.conftest import API_KEY

pytestmark = pytest.mark.functional

POST = "0123456789abcdef0123456789abcd"
RID = request_id(POST, 0)  # a request id the front accepts
R1 = request_id(POST, 1)
AUTH = {"x-api-key": API_KEY}
CARS = ("detector/car.0", "detector/car.1")


def rec(
    task_id: str,
    children: tuple[str, ...] = (),
    status: str = "done",
    weight: str = "1",
    rid: str = RID,
    lineage: tuple[TaskRecord, ...] = (),
    recheck: bool = False,
    t: float = 1.1,
) -> TaskRecord:
    return TaskRecord(
        request_id=rid, task_id=task_id, module=task_id.rsplit("/", 1)[-1].split(".", 1)[0], status=status,
        hardware="t4", emulated=True, enqueued_at=t - 0.1, started_at=t, finished_at=t + 0.1, batch_size=1,
        children=children, output_json=None if status == "dropped" else '{"ok":1}',
        reason="deadline" if status == "dropped" else None, app="traffic", accepted_at=1.0, deadline=3.0,
        weight=weight, lineage=tuple(parent.task_out() for parent in lineage), recheck=recheck,
    )  # fmt: skip


@pytest.fixture
def client(stack):
    from fastapi.testclient import TestClient

    svc = FrontService(
        config=stack.cfg, store=stack.store, plans=stack.plans, results=stack.results, queues=stack.queues,
        blobs=stack.blobs, metrics=stack.metrics,
    )  # fmt: skip
    return TestClient(create_app(lambda: svc))


def frames(*rids: str) -> list[FrameRecord]:
    return [FrameRecord(rid, "traffic", 1.0, 3.0, roots=("detector",)) for rid in rids]


def partition(stack: Any, post: str) -> list[str]:
    page = stack.ddb.query(
        TableName=stack.cfg.results_table,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": post}},
        ConsistentRead=True,
    )
    return sorted(item["sk"]["S"].split("#")[0] for item in page["Items"])


def test_a_frame_is_done_when_its_terminal_tasks_weights_sum_to_one(stack):
    # GIVEN a frame whose detector task forwarded two cars (each carrying half of the frame)
    stack.results.create_frames(frames(RID))
    assert stack.results.get_request(RID).status == "queued"
    detector = rec("detector", children=CARS)
    car0 = rec("detector/car.0", weight="1/2", lineage=(detector,))
    fresh, repeats = stack.results.record_tasks([car0])
    assert (len(fresh), len(repeats)) == (1, 0)
    out = stack.results.get_request(RID)
    assert out.status == "queued"  # car.1's half is missing
    assert sorted(t.task_id for t in out.tasks) == ["detector", "detector/car.0"]  # the detector travelled
    # WHEN car.0 is recorded again (a redelivery the worker could not tell) and car.1 arrives
    stack.results.record_tasks([car0])
    stack.results.record_tasks([rec("detector/car.1", weight="1/2", lineage=(detector,))])
    # THEN the frame is done, each task listed once, its detector's output carried by the cars
    out = stack.results.get_request(RID)
    assert out.status == "done"
    assert [t.task_id for t in out.tasks] == ["detector", *CARS]
    assert out.tasks[0].output == {"ok": 1}
    assert out.latency_s is not None and out.finished_at >= out.tasks[-1].recorded_at


def test_a_frame_with_a_dropped_terminal_task_reads_as_dropped(stack):
    stack.results.create_frames(frames(RID))
    stack.results.record_tasks([rec("detector", status="dropped")])
    out = stack.results.get_request(RID)
    assert (out.status, out.tasks[0].reason) == ("dropped", "deadline")


def test_a_recheck_is_written_only_when_its_post_does_not_hold_the_task(stack):
    stack.results.create_frames(frames(RID, R1))
    stack.results.record_tasks([rec("detector")])
    # WHEN the same task comes again marked for a check, beside a task of another frame
    fresh, repeats = stack.results.record_tasks(
        [rec("detector", recheck=True), rec("detector", rid=R1, recheck=True)]
    )
    # THEN the recorded one is a repeat and the other is written
    assert [r.request_id for r in repeats] == [RID] and [r.request_id for r in fresh] == [R1]
    assert stack.results.recorded(POST) == {(RID, "detector"), (R1, "detector")}


def post_item(stack: Any, post: str) -> dict[str, Any] | None:
    return stack.ddb.get_item(TableName=stack.cfg.results_table, Key=post_key(post), ConsistentRead=True).get(
        "Item"
    )


def test_one_item_per_post_in_its_due_minute_and_one_record_per_batch_and_post(stack):
    # GIVEN two POSTs of three frames
    a, b = new_post_id(3.0), new_post_id(3.0)
    rids_a, rids_b = [request_id(a, i) for i in range(3)], [request_id(b, i) for i in range(3)]
    stack.results.create_frames(frames(*rids_a, *rids_b))
    # THEN each POST is one item, kept in its due minute's partition of the deadline index (no
    # separate index item), and its own partition holds nothing yet
    for post in (a, b):
        item = post_item(stack, post)
        assert item is not None and item["n"]["N"] == "3" and item["app"]["S"] == "traffic"
        shard = int(item["pk"]["S"].rsplit("#", 1)[1])
        assert item["pk"]["S"] == f"due#{due_bucket(3.0)}#{shard}" and 0 <= shard < DUE_SHARDS
        assert partition(stack, post) == []
    # WHEN one batch finishes a task of every frame
    stack.results.record_tasks([rec("detector", rid=rid) for rid in rids_a + rids_b])
    # THEN each POST got one record, and every frame reads done from it
    assert partition(stack, a) == ["part"] and partition(stack, b) == ["part"]
    assert all(stack.results.get_request(rid).status == "done" for rid in rids_a + rids_b)
    assert stack.results.get_request(request_id(a, 3)) is None  # no such frame in the POST
    assert {post_of(rid) for rid in rids_a} == {a}


def test_get_is_one_eventually_consistent_get_of_the_post_item_and_one_query_of_its_records(stack):
    class Counting:
        def __init__(self, real: Any) -> None:
            self._real, self.calls = real, []

        def __getattr__(self, name: str) -> Any:
            if name in ("scan", "batch_get_item"):
                raise AssertionError(f"{name} on the results table: the POST item and its records")
            return getattr(self._real, name)

        def query(self, **kw: Any) -> dict[str, Any]:
            self.calls.append(("query", kw))
            return self._real.query(**kw)

        def get_item(self, **kw: Any) -> dict[str, Any]:
            self.calls.append(("get_item", kw))
            return self._real.get_item(**kw)

    stack.results.create_frames(frames(RID))
    stack.results.record_tasks([rec("detector")])
    ddb = Counting(stack.ddb)
    out = ResultStore(ddb, stack.cfg.results_table).get_request(RID)
    assert out is not None and out.status == "done"
    assert [name for name, _ in ddb.calls] == ["get_item", "query"]
    assert all(kw["ConsistentRead"] is False for _, kw in ddb.calls)
    assert ddb.calls[0][1]["Key"] == post_key(POST)  # found from the id alone
    assert ResultStore(ddb, stack.cfg.results_table).get_request("warm-up") is None  # not an id: no read
    assert len(ddb.calls) == 2
    # AND a POST that was never written reads as unknown after the one GetItem
    ddb.calls.clear()
    assert ResultStore(ddb, stack.cfg.results_table).get_request(request_id(new_post_id(3.0), 0)) is None
    assert [name for name, _ in ddb.calls] == ["get_item"]


def test_a_post_id_due_before_its_frames_is_refused(stack):
    early = new_post_id(3.0)
    with pytest.raises(ValueError, match="is due in minute"):
        stack.results.create_frames(
            [FrameRecord(request_id(early, 0), "traffic", 1.0, 3.0 + 120, ("detector",))]
        )
    assert due_minute(early) == 0 and post_item(stack, early) is None


def test_the_frames_of_a_post_read_by_one_query_serve_the_fronts_gets_of_the_finished_ones(stack):
    class Counting:
        def __init__(self, real: Any) -> None:
            self._real, self.calls = real, 0

        def __getattr__(self, name: str) -> Any:
            return getattr(self._real, name)

        def query(self, **kw: Any) -> dict[str, Any]:
            self.calls += 1
            return self._real.query(**kw)

    # GIVEN a POST of two frames, both finished (one done, one dropped), and one of another POST
    stack.results.create_frames(frames(RID, R1))
    stack.results.record_tasks([rec("detector"), rec("detector", status="dropped", rid=R1)])
    ddb = Counting(stack.ddb)
    results = ResultStore(ddb, stack.cfg.results_table)
    got = results.get_post_requests(R1)
    assert got is not None and {rid: out.status for rid, out in got.items()} == {RID: "done", R1: "dropped"}
    assert results.get_post_requests(request_id(new_post_id(3.0), 0)) is None  # no such POST
    # WHEN the front answers a GET of each frame
    svc = FrontService(
        config=stack.cfg, store=stack.store, plans=stack.plans, results=results, queues=stack.queues,
        blobs=stack.blobs, metrics=stack.metrics,
    )  # fmt: skip
    ddb.calls = 0
    assert [svc.result(rid).status for rid in (RID, R1)] == ["done", "dropped"]
    # THEN one Query of the POST's partition answered both
    assert ddb.calls == 1


def test_outcome_shares_count_each_frame_once_across_its_terminal_tasks(stack):
    metrics = MemoryMetrics()
    outcomes = FrameOutcomes(metrics)
    detector = rec("detector", children=CARS)
    # a frame whose two cars finish, one by the deadline (3.0) and one after it
    on_time = rec("detector/car.0", weight="1/2", lineage=(detector,), t=2.0)
    late = rec("detector/car.1", weight="1/2", lineage=(detector,), t=3.5)
    assert outcomes.submit([on_time, late, detector]) == 1.0  # the parent (it has children) is not terminal
    assert metrics.total("FramesFinished", App="traffic") == pytest.approx(1.0)
    assert metrics.weights("SloAttainment", App="traffic") == pytest.approx(1.0)
    assert metrics.total("SloAttainment", App="traffic") == pytest.approx(0.5)
    assert metrics.total("FramesDropped", App="traffic") == 0


def test_a_failed_read_is_a_result_store_error(stack):
    class Broken:
        def __init__(self, real: Any) -> None:
            self._real = real

        def __getattr__(self, name: str) -> Any:
            return getattr(self._real, name)

        def query(self, **kw: Any) -> dict[str, Any]:
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "down"}}, "Query")

    class BrokenGet(Broken):
        def get_item(self, **kw: Any) -> dict[str, Any]:
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "down"}}, "GetItem")

    stack.results.create_frames(frames(RID))
    for broken in (Broken, BrokenGet):  # the records' Query, and the POST item's GetItem
        with pytest.raises(ResultStoreError, match=f"cannot read POST {POST}"):
            ResultStore(broken(stack.ddb), stack.cfg.results_table).get_request(RID)


# -- retention ----------------------------------------------------------------------------------------


def test_every_item_of_a_request_expires_a_retention_after_its_write(stack):
    # GIVEN a store keeping items one day, and the table's TTL on the attribute the items carry
    ttl = stack.ddb.describe_time_to_live(TableName=stack.cfg.results_table)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", EXPIRES_AT)
    store = ResultStore(stack.ddb, stack.cfg.results_table, retention_s=86_400.0)
    # WHEN a POST and a record of its frame are written
    before = time.time()
    store.create_frames(frames(RID))
    store.record_tasks([rec("detector")])
    after = time.time()
    # THEN each item expires one day after it was written (whole seconds, rounded up)
    items = stack.ddb.query(
        TableName=stack.cfg.results_table,
        KeyConditionExpression="pk = :r",
        ExpressionAttributeValues={":r": {"S": POST}},
    )["Items"] + [post_item(stack, POST)]
    assert sorted(i["sk"]["S"].split("#")[0] for i in items) == [POST, "part"]
    for item in items:
        assert before + 86_400 <= float(item[EXPIRES_AT]["N"]) <= math.ceil(after + 86_400)


def test_a_frame_past_its_expiry_reads_as_unknown_before_dynamodb_deletes_it(stack, client):
    # GIVEN a done frame whose items expired a second ago (DynamoDB deletes them within days)
    stack.results.create_frames(frames(RID))
    stack.results.record_tasks([rec("detector")])
    assert client.get(f"/v1/requests/{RID}", headers=AUTH).json()["status"] == "done"
    stack.ddb.update_item(
        TableName=stack.cfg.results_table,
        Key=post_key(POST),
        UpdateExpression="SET #e = :e",
        ExpressionAttributeNames={"#e": EXPIRES_AT},
        ExpressionAttributeValues={":e": {"N": str(int(time.time()) - 1)}},
    )
    # WHEN it is read THEN it is unknown, as it will be once deleted
    assert stack.results.get_request(RID) is None
    r = client.get(f"/v1/requests/{RID}", headers=AUTH)
    assert (r.status_code, r.json()["error"]) == (404, "unknown_request")
