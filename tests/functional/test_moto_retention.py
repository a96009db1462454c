"""The local moto server's retention sweep: DynamoDB items past their TTL attribute are deleted (what
DynamoDB does; moto never does), old metric data points dropped, and nothing else touched."""

from __future__ import annotations

import datetime as dt
import time

import boto3
import pytest
from moto import mock_aws

from core.adapters.results import EXPIRES_AT
from core.settings import DataPlaneConfig
from skinflint.local.moto_server import expire_data
from skinflint.local.provision import create_base

pytestmark = pytest.mark.functional


def _item(pk: str, sk: str, expires: float | str | None) -> dict:
    item = {"pk": {"S": pk}, "sk": {"S": sk}}
    if isinstance(expires, str):
        item[EXPIRES_AT] = {"S": expires}
    elif expires is not None:
        item[EXPIRES_AT] = {"N": str(int(expires))}
    return item


def test_the_sweep_deletes_only_items_past_their_ttl_in_tables_with_ttl():
    with mock_aws():
        cfg = DataPlaneConfig()
        ddb = boto3.client("dynamodb", region_name=cfg.region)
        create_base(ddb, boto3.client("s3", region_name=cfg.region), cfg)
        now = time.time()
        # GIVEN a request whose items all expired, one with a live item, items without a number there
        for sk in ("frame", "task#a", "outcome"):
            ddb.put_item(TableName=cfg.results_table, Item=_item("old", sk, now - 5))
        ddb.put_item(TableName=cfg.results_table, Item=_item("mixed", "frame", now - 5))
        ddb.put_item(TableName=cfg.results_table, Item=_item("mixed", "task#a", now + 3600))
        ddb.put_item(TableName=cfg.results_table, Item=_item("none", "frame", None))
        ddb.put_item(TableName=cfg.results_table, Item=_item("text", "frame", "yesterday"))
        # and the config table (no TTL) holding an item with a past expires_at
        ddb.put_item(
            TableName=cfg.config_table, Item={"pk": {"S": "k"}, EXPIRES_AT: {"N": str(int(now - 5))}}
        )
        # WHEN the sweep runs
        swept = expire_data(now, metric_retention_s=None)

        # THEN exactly the four expired items are gone
        def there(pk: str, sk: str) -> bool:
            key = {"pk": {"S": pk}, "sk": {"S": sk}}
            return "Item" in ddb.get_item(TableName=cfg.results_table, Key=key)

        assert swept == {"items": 4, "metric_points": 0}
        assert not any(there("old", sk) for sk in ("frame", "task#a", "outcome"))
        assert (there("mixed", "frame"), there("mixed", "task#a")) == (False, True)
        assert there("none", "frame") and there("text", "frame")
        assert "Item" in ddb.get_item(TableName=cfg.config_table, Key={"pk": {"S": "k"}})
        # and a write to an emptied partition still lands
        ddb.put_item(TableName=cfg.results_table, Item=_item("old", "frame", now + 60))
        assert there("old", "frame")
        assert expire_data(now, None)["items"] == 0


def test_the_sweep_drops_metric_points_older_than_the_retention():
    with mock_aws():
        cw = boto3.client("cloudwatch", region_name="us-east-1")
        now = time.time()

        def put(age_s: float, value: float) -> None:
            at = dt.datetime.fromtimestamp(now - age_s, tz=dt.UTC)
            cw.put_metric_data(
                Namespace="Skinflint",
                MetricData=[{"MetricName": "FramesAccepted", "Timestamp": at, "Value": value}],
            )

        put(7200, 1.0)
        put(4000, 2.0)
        put(60, 4.0)
        assert expire_data(now, metric_retention_s=3600)["metric_points"] == 2
        got = cw.get_metric_statistics(
            Namespace="Skinflint",
            MetricName="FramesAccepted",
            StartTime=dt.datetime.fromtimestamp(now - 9000, tz=dt.UTC),
            EndTime=dt.datetime.fromtimestamp(now + 60, tz=dt.UTC),
            Period=60,
            Statistics=["Sum"],
        )["Datapoints"]
        assert sum(p["Sum"] for p in got) == 4.0
        assert expire_data(now, metric_retention_s=None)["metric_points"] == 0  # kept unless asked


def test_untracked_models_are_freed_once_the_service_lets_go(monkeypatch):
    import gc
    import weakref

    from moto.core.common_models import BaseModel
    from moto.dynamodb.models.dynamo_type import Item

    from skinflint.local.moto_server import untrack_models

    monkeypatch.setattr(BaseModel, "__new__", BaseModel.__dict__["__new__"])  # restored after the test
    with mock_aws():
        cfg = DataPlaneConfig()
        ddb = boto3.client("dynamodb", region_name=cfg.region)
        create_base(ddb, boto3.client("s3", region_name=cfg.region), cfg)
        untrack_models()
        tracked = len(Item.instances_tracked)
        # GIVEN an item written and then overwritten (moto keeps every Item it built, by default)
        ddb.put_item(TableName=cfg.results_table, Item=_item("r", "frame", time.time() - 1))
        (first,) = [i for i in gc.get_objects() if isinstance(i, Item) and i.hash_key.value == "r"]
        gone = weakref.ref(first)
        del first
        ddb.put_item(TableName=cfg.results_table, Item=_item("r", "frame", time.time() + 60))
        # THEN nothing was tracked and the replaced item was freed (moto's own model, no cycle)
        assert len(Item.instances_tracked) == tracked
        assert gone() is None


def test_a_sweep_stops_at_the_first_live_partition():
    with mock_aws():
        cfg = DataPlaneConfig()
        ddb = boto3.client("dynamodb", region_name=cfg.region)
        create_base(ddb, boto3.client("s3", region_name=cfg.region), cfg)
        now = time.time()
        # GIVEN partitions in write order: expired, live, then one expired behind the live one
        ddb.put_item(TableName=cfg.results_table, Item=_item("a", "frame", now - 9))
        ddb.put_item(TableName=cfg.results_table, Item=_item("b", "frame", now + 60))
        ddb.put_item(TableName=cfg.results_table, Item=_item("c", "frame", now - 1))
        # WHEN swept now, and again once b has expired
        first, later = expire_data(now, None)["items"], expire_data(now + 61, None)["items"]
        # THEN the first sweep stops at b (what follows it is newer); the next one takes b and c
        assert (first, later) == (1, 2)
