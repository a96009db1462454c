"""The plan pointer's hints on moto: a polling reader (every front instance and instance agent, every
second) reads one small hint item, eventually consistently, the pointer itself (consistently) only
when the hint cannot settle it, never sees a version the pointer does not name, and never goes back
to an older document when a replica behind answers."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from core.adapters.plan_store import HINT_DOC_BYTES, HINTS, POINTER, PlanStore, PlanStoreError, hint_key
from tests.functional.test_control_plan_store import ddb, publish  # noqa: F401 - the moto fixture

pytestmark = pytest.mark.functional


class Reads:
    """The DynamoDB client, recording the key of every GetItem."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.keys: list[str] = []
        self.consistent: list[bool] = []
        self.fail_pointer_put = False
        self.stale_hints: dict[str, Any] = {}  # key -> the item a replica behind answers instead

    def get_item(self, **kw: Any) -> Any:
        key = kw["Key"]["pk"]["S"]
        self.keys.append(key)
        self.consistent.append(bool(kw.get("ConsistentRead")))
        if key in self.stale_hints and not kw.get("ConsistentRead"):
            return {"Item": self.stale_hints[key]}
        return self._real.get_item(**kw)

    def put_item(self, **kw: Any) -> Any:
        if self.fail_pointer_put and kw["Item"]["pk"]["S"] == POINTER:
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "injected"}}, "PutItem")
        return self._real.put_item(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_a_polling_reader_reads_one_hint_and_never_the_pointer_while_nothing_changes(ddb: Any) -> None:  # noqa: F811
    writer = PlanStore(ddb, "skinflint-config")
    v1 = publish(writer, 1.0, None)
    reads = Reads(ddb)
    reader = PlanStore(reads, "skinflint-config", hint_shard=5)
    for _ in range(10):  # ten seconds of a front instance
        assert reader.current_hinted() == v1 == writer.current()
    assert reads.keys == [hint_key(5)] * 10  # a settled hint is the pointer: no pointer read at all
    assert reads.consistent == [False] * 10  # and no strongly consistent read: half a read unit each
    item = ddb.get_item(TableName="skinflint-config", Key={"pk": {"S": hint_key(5)}})["Item"]
    assert len(item["doc"]["S"].encode()) <= HINT_DOC_BYTES  # one read unit (4 KB) per check


def test_a_new_version_and_an_earlier_activation_reach_the_reader_through_its_hint(ddb: Any) -> None:  # noqa: F811
    writer = PlanStore(ddb, "skinflint-config")
    v1 = publish(writer, 1.0, None)
    reads = Reads(ddb)
    reader = PlanStore(reads, "skinflint-config", hint_shard=0)
    assert reader.current_hinted() == v1
    v2 = publish(writer, 2.0, v1.version)
    assert reader.current_hinted() == v2
    sooner = writer.set_activation(v2, v2.activate_at - 1.0, activation="ready")
    assert reader.current_hinted() == sooner == writer.current()
    assert POINTER not in reads.keys
    # every hint says the same (readers on any shard agree)
    docs = {
        ddb.get_item(TableName="skinflint-config", Key={"pk": {"S": hint_key(i)}})["Item"]["doc"]["S"]
        for i in range(HINTS)
    }
    assert docs == {sooner.model_dump_json()}


def test_a_failed_flip_leaves_the_hints_pending_and_readers_on_the_pointer(ddb: Any) -> None:  # noqa: F811
    # GIVEN v1 in force, and a writer whose pointer write fails after it made the hints pending
    store = PlanStore(ddb, "skinflint-config")
    v1 = publish(store, 1.0, None)
    failing = Reads(ddb)
    failing.fail_pointer_put = True
    with pytest.raises(PlanStoreError, match="cannot flip"):
        publish(PlanStore(failing, "skinflint-config"), 2.0, v1.version)
    # THEN a reader never sees the version the pointer does not name: it reads the pointer (v1)
    reads = Reads(ddb)
    reader = PlanStore(reads, "skinflint-config", hint_shard=3)
    assert reader.current_hinted() == v1 and reader.current_hinted() == v1
    assert reads.keys.count(POINTER) == 2  # the pending hint names another document: each check
    # WHEN the next publish succeeds, its hints settle and the reader is back on the hint alone
    v3 = publish(store, 3.0, v1.version)
    reads.keys.clear()
    assert reader.current_hinted() == v3 and reads.keys == [hint_key(3)]


def test_a_large_pointer_document_leaves_checksums_and_is_read_once_per_change(ddb: Any) -> None:  # noqa: F811
    store = PlanStore(ddb, "skinflint-config")
    big = publish(store, 1.0, None, apps=40)  # forty apps: a manifest over HINT_DOC_BYTES
    assert len(big.model_dump_json().encode()) > HINT_DOC_BYTES
    reads = Reads(ddb)
    reader = PlanStore(reads, "skinflint-config", hint_shard=9)
    for _ in range(5):
        assert reader.current_hinted() == big
    assert reads.keys == [hint_key(9), POINTER] + [hint_key(9)] * 4


def test_a_settle_never_overwrites_a_later_writers_pending_hint(ddb: Any) -> None:  # noqa: F811
    # GIVEN v1 in force and another writer that has made the hints pending on its document
    store = PlanStore(ddb, "skinflint-config")
    v1 = publish(store, 1.0, None)
    store._hints_pending('{"another": "document"}')
    # WHEN the settle of v1 comes late (after the other writer's pending write)
    store._hints_settle(v1.model_dump_json())
    # THEN the hints stay pending on the other document (readers go to the pointer)
    item = ddb.get_item(TableName="skinflint-config", Key={"pk": {"S": hint_key(0)}})["Item"]
    assert "doc" not in item
    reads = Reads(ddb)
    assert PlanStore(reads, "skinflint-config", hint_shard=0).current_hinted() == v1
    assert reads.keys == [hint_key(0), POINTER]


def test_readers_spread_over_the_hints() -> None:
    shards = {PlanStore(object(), "t")._hint_shard for _ in range(400)}
    assert shards == set(range(HINTS))  # 400 draws of 16: all hit (chance of a miss ~ 16 x (15/16)^400)


def _hint_item(client: Any, shard: int) -> Any:
    return client.get_item(
        TableName="skinflint-config", Key={"pk": {"S": hint_key(shard)}}, ConsistentRead=True
    )["Item"]


def test_a_replica_behind_never_takes_a_reader_back(ddb: Any) -> None:  # noqa: F811
    # GIVEN a reader that saw v1, then v2 with its activation moved earlier
    writer = PlanStore(ddb, "skinflint-config")
    v1 = publish(writer, 1.0, None)
    reads = Reads(ddb)
    reader = PlanStore(reads, "skinflint-config", hint_shard=2)
    assert reader.current_hinted() == v1
    v1_hint = _hint_item(ddb, 2)
    v2 = publish(writer, 2.0, v1.version)
    assert reader.current_hinted() == v2
    v2_hint = _hint_item(ddb, 2)
    sooner = writer.set_activation(v2, v2.activate_at - 1.0, activation="ready")
    assert reader.current_hinted() == sooner
    reads.keys.clear()
    # WHEN replicas behind answer its eventually consistent hint reads with the older documents
    for stale in (v1_hint, v2_hint):
        reads.stale_hints[hint_key(2)] = stale
        # THEN it keeps the newest document it holds, without reading the pointer
        assert reader.current_hinted() == sooner
    assert reads.keys == [hint_key(2)] * 2
    # and an older document it never held (v2 before the move, seen by a reader that started late)
    late = PlanStore(reads, "skinflint-config", hint_shard=2)
    reads.stale_hints.clear()
    assert late.current_hinted() == sooner
    reads.stale_hints[hint_key(2)] = v2_hint
    assert late.current_hinted() == sooner  # the same version activating later: older, ignored


def test_a_pending_hint_is_confirmed_by_one_consistent_pointer_read(ddb: Any) -> None:  # noqa: F811
    writer = PlanStore(ddb, "skinflint-config")
    v1 = publish(writer, 1.0, None)
    reads = Reads(ddb)
    reader = PlanStore(reads, "skinflint-config", hint_shard=4)
    assert reader.current_hinted() == v1
    # a writer between its pending write and its flip: the reader asks the pointer (still v1)
    writer._hints_pending('{"another": "document"}')
    reads.keys.clear()
    reads.consistent.clear()
    assert reader.current_hinted() == v1
    assert list(zip(reads.keys, reads.consistent, strict=True)) == [(hint_key(4), False), (POINTER, True)]


def test_the_immutable_plan_items_are_read_eventually_consistently_then_consistently_if_missing(
    ddb: Any,  # noqa: F811
) -> None:
    class BatchReads(Reads):
        def __init__(self, real: Any) -> None:
            super().__init__(real)
            self.batches: list[bool] = []
            self.lagging = False  # a replica that does not have the items yet

        def batch_get_item(self, **kw: Any) -> Any:
            consistent = all(bool(want.get("ConsistentRead")) for want in kw["RequestItems"].values())
            self.batches.append(consistent)
            if self.lagging and not consistent:
                return {"Responses": {}, "UnprocessedKeys": {}}
            return self._real.batch_get_item(**kw)

    writer = PlanStore(ddb, "skinflint-config")
    v1 = publish(writer, 1.0, None)
    reads = BatchReads(ddb)
    reader = PlanStore(reads, "skinflint-config")
    app = next(iter(v1.apps))
    assert reader.deployment(v1.version, app) == writer.deployment(v1.version, app) is not None
    assert reader.fleet(v1.version) is not None
    assert reads.batches == [False, False]  # found: no consistent read
    reads.batches.clear()
    reads.lagging = True
    assert reader.deployment(v1.version, app) is not None  # not there yet: the consistent read finds it
    assert reads.batches == [False, True]
