"""The plan pointer's hints on moto: a polling reader (every front instance, every second) reads one
small hint item, the pointer itself only on a change, and never sees a version the pointer does not
name."""

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
        self.fail_pointer_put = False

    def get_item(self, **kw: Any) -> Any:
        self.keys.append(kw["Key"]["pk"]["S"])
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
