"""The local moto server answers a Query of a table's key from its partition (moto_server.indexed_queries)
with the same items, order and pages as moto's own scan of the whole table."""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.dynamodb.models.table import Table

from skinflint.local.moto_server import indexed_queries

pytestmark = pytest.mark.functional


def _query(ddb: Any, pk: str, **kw: Any) -> list[list[str]]:
    pages, start = [], None
    while True:
        args = {
            "TableName": "t",
            "KeyConditionExpression": "pk = :p",
            "ExpressionAttributeValues": {":p": {"S": pk}},
        }
        if start:
            args["ExclusiveStartKey"] = start
        page = ddb.query(**args, **kw)
        pages.append([item["sk"]["S"] for item in page["Items"]])
        start = page.get("LastEvaluatedKey")
        if not start:
            return pages


def test_a_query_reads_its_partition_only_and_answers_as_moto_does(monkeypatch):
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )  # fmt: skip
        for p in range(300):
            for s in range(5 if p else 40):
                ddb.put_item(
                    TableName="t", Item={"pk": {"S": f"p{p}"}, "sk": {"S": f"s{s:03d}"}, "v": {"S": "x" * 9}}
                )
        cases = [
            ("p0", {}),
            ("p0", {"Limit": 7}),
            ("p0", {"ScanIndexForward": False}),
            ("p9", {}),
            ("none", {}),
        ]
        before = [_query(ddb, pk, **kw) for pk, kw in cases]
        t0 = time.perf_counter()
        _query(ddb, "p5")
        scan_s = time.perf_counter() - t0
        # WHEN the partition index is installed (restored after the test)
        monkeypatch.setattr(Table, "query", Table.query)
        monkeypatch.setattr(Table, "all_items", Table.all_items)
        indexed_queries()
        # THEN every query answers the same items in the same order and pages, faster
        assert [_query(ddb, pk, **kw) for pk, kw in cases] == before
        assert before[1][0] == [f"s{s:03d}" for s in range(7)] and before[2][0][0] == "s039"
        t0 = time.perf_counter()
        _query(ddb, "p5")
        assert time.perf_counter() - t0 < scan_s
        # and a Scan still lists every item
        assert ddb.scan(TableName="t", Select="COUNT")["Count"] == 40 + 299 * 5
