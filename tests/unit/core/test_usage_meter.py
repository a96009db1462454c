"""The AWS request meter (``core/adapters/usage.py``): DynamoDB item sizes and request units per
operation kind, SQS's 64 KB chunks, S3's request classes, the hooks on a real (stubbed) botocore
client, the front's HTTP middleware, publication through the metrics and the off switch. No network:
botocore's Stubber answers; FastAPI's TestClient serves in process."""

from __future__ import annotations

import pytest

from core.adapters.metrics import MemoryMetrics
from core.adapters.usage import (
    HttpUsage,
    UsageMeter,
    attach,
    dynamodb_read_units,
    dynamodb_write_units,
    item_size,
    meter,
    prepare_dynamodb,
    report_to,
    s3_unit,
    sqs_requests,
)
from core.clients import make_client
from core.settings import DataPlaneConfig, usage_metering_from_env


@pytest.fixture(autouse=True)
def _no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials (a client is made, never signs a request) and no instance metadata."""
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SKINFLINT_USAGE_METERING", raising=False)


def s(text: str) -> dict[str, str]:
    return {"S": text}


# -- item sizes ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("item", "size"),
    [
        ({"pk": s("abc")}, 5),  # 2 + 3
        ({"pk": s("é")}, 4),  # 2 + 2 UTF-8 bytes
        ({"n": {"N": "12345"}}, 5),  # 1 + (5 digits + 1) // 2 + 1 = 1 + 3 + 1
        ({"n": {"N": "-100.0"}}, 4),  # zeros counted (a byte over): 1 + (4 + 1) // 2 + 1
        ({"b": {"B": b"\x00" * 10}}, 11),  # raw bytes, not base64
        ({"t": {"BOOL": True}, "z": {"NULL": True}}, 4),  # 1 + 1, 1 + 1
        ({"l": {"L": [s("ab"), s("c")]}}, 1 + 3 + (2 + 1) + (1 + 1)),  # 3 + each element + 1
        ({"m": {"M": {"k": s("vv")}}}, 1 + 3 + (1 + 2 + 1)),  # 3 + name + value + 1
        ({"ss": {"SS": ["a", "bb"]}}, 2 + 3),
        ({}, 0),
    ],
)
def test_item_size_follows_dynamodbs_rules(item, size):
    assert item_size(item) == size


def big(n: int) -> dict[str, dict[str, str]]:
    """An item of exactly ``n`` bytes: pk (2 + 1) and v (1 + n - 4)."""
    return {"pk": s("a"), "v": s("x" * (n - 4))}


# -- DynamoDB units per operation --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("params", "answer", "units"),
    [
        ({"ConsistentRead": True}, {"Item": big(4096)}, 1.0),  # 4 KB: one unit
        ({"ConsistentRead": True}, {"Item": big(4097)}, 2.0),  # one byte more: two
        ({}, {"Item": big(5000)}, 1.0),  # eventually consistent: 2 x 0.5
        ({}, {}, 0.5),  # nothing found still reads: the minimum
    ],
)
def test_get_item_read_units(params, answer, units):
    prep = prepare_dynamodb("GetItem", params)
    assert dynamodb_read_units("GetItem", prep, answer) == units
    assert dynamodb_write_units("GetItem", prep, answer) == 0.0  # a read writes nothing


def test_batch_get_item_counts_each_key_asked_for():
    # GIVEN 5 keys of one table (consistent) and 2 of another (eventual)
    params = {
        "RequestItems": {
            "t1": {"Keys": [{"pk": s(str(i))} for i in range(5)], "ConsistentRead": True},
            "t2": {"Keys": [{"pk": s("a")}, {"pk": s("b")}]},
        }
    }
    answer = {
        # t1: a 5 KB item (2 units) and a small one (1); 1 key unprocessed; 2 found nothing (1 each)
        "Responses": {"t1": [big(5000), big(100)], "t2": [big(100)]},
        "UnprocessedKeys": {"t1": {"Keys": [{"pk": s("4")}]}},
    }
    prep = prepare_dynamodb("BatchGetItem", params)
    # t1: 2 + 1 + (5 - 1 - 2) x 1 = 5; t2: 0.5 + (2 - 0 - 1) x 0.5 = 1.0
    assert dynamodb_read_units("BatchGetItem", prep, answer) == 6.0


def test_consumed_capacity_counts_only_when_the_request_asked_for_it():
    # moto answers a BatchGetItem with a ConsumedCapacity of its own (1 per key), asked or not
    params = {"RequestItems": {"t": {"Keys": [{"pk": s("a")}, {"pk": s("b")}]}}}
    answer = {"Responses": {"t": [big(100)]}, "ConsumedCapacity": [{"TableName": "t", "CapacityUnits": 2.0}]}
    prep = prepare_dynamodb("BatchGetItem", params)
    assert dynamodb_read_units("BatchGetItem", prep, answer) == 1.0  # 0.5 + 1 missing x 0.5
    assert dynamodb_read_units("BatchGetItem", prep, answer, asked=True) == 2.0


@pytest.mark.parametrize(
    ("answer", "units"),
    [
        ({"Items": [big(3000), big(3000)], "Count": 2, "ScannedCount": 2}, 1.0),  # 6000 B -> 2 x 0.5
        ({"Items": [big(1000)], "Count": 1, "ScannedCount": 10}, 1.5),  # 1000 x 10 = 10000 B -> 3 x 0.5
        ({"Items": [], "Count": 0, "ScannedCount": 8}, 1.0),  # 8 x 1 KB assumed -> 2 x 0.5
        ({"Items": [], "Count": 0, "ScannedCount": 0}, 0.5),  # the minimum
    ],
)
def test_scan_reads_the_size_of_what_it_evaluated(answer, units):
    assert dynamodb_read_units("Scan", prepare_dynamodb("Scan", {}), answer) == units


def test_query_consistent_reads_cost_twice():
    answer = {"Items": [big(3000), big(3000)], "Count": 2, "ScannedCount": 2}
    assert dynamodb_read_units("Query", prepare_dynamodb("Query", {"ConsistentRead": True}), answer) == 2.0


@pytest.mark.parametrize(
    ("size", "units"), [(10, 1.0), (1024, 1.0), (1025, 2.0), (3000, 3.0)]
)  # 1 unit per KB, rounded up
def test_put_item_write_units_per_kb(size, units):
    prep = prepare_dynamodb("PutItem", {"Item": big(size)})
    assert dynamodb_write_units("PutItem", prep, {}) == units
    assert dynamodb_read_units("PutItem", prep, {}) == 0.0


def test_a_write_refused_on_its_condition_still_consumes_and_other_errors_do_not():
    prep = prepare_dynamodb("PutItem", {"Item": big(2000)})
    assert dynamodb_write_units("PutItem", prep, {}, "ConditionalCheckFailedException") == 2.0
    assert dynamodb_write_units("PutItem", prep, {}, "ValidationException") == 0.0
    assert dynamodb_write_units("PutItem", prep, {}, "ProvisionedThroughputExceededException") == 0.0


def test_update_and_delete_units():
    # an update counts its key and its values: 3 + (2 + 1500 bytes) > 1 KB -> 2 units
    update = {"Key": {"pk": s("a")}, "ExpressionAttributeValues": {":v": s("x" * 1500)}}
    assert dynamodb_write_units("UpdateItem", prepare_dynamodb("UpdateItem", update), {}) == 2.0
    # a delete is the minimum, unless its old item came back (ReturnValues=ALL_OLD): 3 KB -> 3 units
    prep = prepare_dynamodb("DeleteItem", {"Key": {"pk": s("a")}})
    assert dynamodb_write_units("DeleteItem", prep, {}) == 1.0
    assert dynamodb_write_units("DeleteItem", prep, {"Attributes": big(3000)}) == 3.0


def test_batch_write_item_counts_each_item_and_not_what_came_back_unprocessed():
    puts = [{"PutRequest": {"Item": big(n)}} for n in (100, 1500, 2500)]  # 1 + 2 + 3
    deletes = [{"DeleteRequest": {"Key": {"pk": s("a")}}}]  # 1
    prep = prepare_dynamodb("BatchWriteItem", {"RequestItems": {"t": puts + deletes}})
    assert prep == 7.0
    assert dynamodb_write_units("BatchWriteItem", prep, {"UnprocessedItems": {}}) == 7.0
    left = {"UnprocessedItems": {"t": [puts[2]]}}
    assert dynamodb_write_units("BatchWriteItem", prep, left) == 4.0  # 7 - 3


def test_transactions_cost_twice():
    items = [{"Put": {"Item": big(1500)}}, {"ConditionCheck": {"Key": {"pk": s("a")}}}]
    prep = prepare_dynamodb("TransactWriteItems", {"TransactItems": items})
    assert dynamodb_write_units("TransactWriteItems", prep, {}) == 6.0  # 2 x 2 + 2 x 1
    answer = {"Responses": [{"Item": big(5000)}, {}]}
    assert dynamodb_read_units("TransactGetItems", None, answer) == 6.0  # 2 x 2 + 2 x 1


# -- SQS and S3 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("request_bytes", "answer_bytes", "requests"),
    [(0, 0, 1), (65_536, 100, 1), (65_537, 100, 2), (200, 150_000, 3), (256 * 1024, 0, 4)],
)
def test_sqs_bills_each_64_kb_chunk(request_bytes, answer_bytes, requests):
    assert sqs_requests(request_bytes, answer_bytes) == requests


@pytest.mark.parametrize(
    ("op", "unit"),
    [
        ("PutObject", "PutClassRequests"),
        ("CopyObject", "PutClassRequests"),
        ("ListObjectsV2", "PutClassRequests"),
        ("CompleteMultipartUpload", "PutClassRequests"),
        ("GetObject", "GetClassRequests"),
        ("HeadObject", "GetClassRequests"),
        ("DeleteObject", None),
        ("AbortMultipartUpload", None),
    ],
)
def test_s3_request_classes(op, unit):
    assert s3_unit(op) == unit


# -- the hooks on a client -------------------------------------------------------------------------------
def stubbed(service: str, component: str, cfg: DataPlaneConfig | None = None):
    from botocore.stub import Stubber

    client = make_client(service, cfg or DataPlaneConfig(), component)
    return client, Stubber(client)


def test_a_clients_calls_are_counted_with_their_units():
    m = meter("unit-ddb")
    m.clear()
    ddb, stub = stubbed("dynamodb", "unit-ddb")
    stub.add_response("get_item", {"Item": big(5000)}, {"TableName": "t", "Key": {"pk": s("a")}})
    stub.add_response(
        "batch_write_item",
        {"UnprocessedItems": {}},
        {"RequestItems": {"t": [{"PutRequest": {"Item": big(1500)}}]}},
    )
    stub.add_client_error("put_item", "ConditionalCheckFailedException", http_status_code=400)
    stub.add_client_error("put_item", "ValidationException", http_status_code=400)
    with stub:
        ddb.get_item(TableName="t", Key={"pk": s("a")})
        ddb.batch_write_item(RequestItems={"t": [{"PutRequest": {"Item": big(1500)}}]})
        for _ in range(2):
            with pytest.raises(ddb.exceptions.ClientError):
                ddb.put_item(TableName="t", Item=big(3000), ConditionExpression="attribute_not_exists(pk)")
    requests, units = m.counts()
    assert requests == {
        ("dynamodb", "GetItem"): 1,
        ("dynamodb", "BatchWriteItem"): 1,
        ("dynamodb", "PutItem"): 2,
    }
    # reads: 5000 B eventually consistent = 2 x 0.5; writes: 2 (batch) + 3 (the refused put), not the invalid one
    assert units == {("dynamodb", "ReadRequestUnits"): 1.0, ("dynamodb", "WriteRequestUnits"): 5.0}


def test_sqs_s3_cloudwatch_and_lambda_units():
    m = meter("unit-mixed")
    m.clear()
    sqs, sqs_stub = stubbed("sqs", "unit-mixed")
    entries = [{"Id": str(i), "MessageBody": "x" * 40_000} for i in range(3)]  # 120 KB: 2 chunks
    sqs_stub.add_response("send_message_batch", {"Successful": [], "Failed": []})
    s3, s3_stub = stubbed("s3", "unit-mixed")
    s3_stub.add_response("put_object", {})
    s3_stub.add_response("delete_object", {})
    cw, cw_stub = stubbed("cloudwatch", "unit-mixed")
    queries = [
        {
            "Id": f"q{i}",
            "MetricStat": {"Metric": {"Namespace": "N", "MetricName": "m"}, "Period": 60, "Stat": "Sum"},
        }
        for i in range(3)
    ]
    cw_stub.add_response("get_metric_data", {"MetricDataResults": []})
    cw_stub.add_response("put_metric_data", {})
    lam, lam_stub = stubbed("lambda", "unit-mixed")
    lam_stub.add_response("invoke", {"StatusCode": 202})
    with sqs_stub, s3_stub, cw_stub, lam_stub:
        sqs.send_message_batch(QueueUrl="https://sqs.us-east-1.amazonaws.com/1/q", Entries=entries)
        s3.put_object(Bucket="b-x", Key="k", Body=b"1")
        s3.delete_object(Bucket="b-x", Key="k")
        cw.get_metric_data(MetricDataQueries=queries, StartTime=0, EndTime=60)
        cw.put_metric_data(Namespace="N", MetricData=[{"MetricName": "m", "Value": 1.0}])
        lam.invoke(FunctionName="f", InvocationType="Event", Payload=b"{}")
    requests, units = m.counts()
    assert sum(requests.values()) == 6 and requests[("s3", "DeleteObject")] == 1
    assert units == {
        ("sqs", "Requests"): 2.0,
        ("s3", "PutClassRequests"): 1.0,  # the delete is free
        ("monitoring", "MetricsRequested"): 3.0,
        ("monitoring", "Requests"): 1.0,
        ("lambda", "Requests"): 1.0,
    }


def test_attaching_twice_counts_once_and_the_off_switch_attaches_nothing():
    m = meter("unit-twice")
    m.clear()
    sqs, stub = stubbed("sqs", "unit-twice")
    attach(sqs, "unit-twice")
    stub.add_response("get_queue_attributes", {"Attributes": {}})
    with stub:
        sqs.get_queue_attributes(QueueUrl="https://sqs.us-east-1.amazonaws.com/1/q")
    assert m.counts()[0] == {("sqs", "GetQueueAttributes"): 1}
    # off: no hook, nothing counted
    off = meter("unit-off")
    off.clear()
    sqs, stub = stubbed("sqs", "unit-off", DataPlaneConfig(usage_metering=False))
    stub.add_response("get_queue_attributes", {"Attributes": {}})
    with stub:
        sqs.get_queue_attributes(QueueUrl="https://sqs.us-east-1.amazonaws.com/1/q")
    assert off.counts() == ({}, {})


@pytest.mark.parametrize(
    ("raw", "on"), [(None, True), ("", True), ("on", True), ("OFF", False), ("0", False)]
)
def test_the_setting(raw, on):
    env = {} if raw is None else {"SKINFLINT_USAGE_METERING": raw}
    assert usage_metering_from_env(env) is on
    assert DataPlaneConfig.from_env(env).usage_metering is on
    assert DataPlaneConfig.from_env(DataPlaneConfig.from_env(env).to_env()).usage_metering is on


def test_a_malformed_setting_is_one_line_naming_it():
    with pytest.raises(ValueError, match=r"^SKINFLINT_USAGE_METERING must be on or off, got 'maybe'$"):
        DataPlaneConfig.from_env({"SKINFLINT_USAGE_METERING": "maybe"})


# -- publication -----------------------------------------------------------------------------------------
def test_counts_go_out_with_the_metrics_flush_and_start_again():
    m = UsageMeter("worker")
    metrics = report_to(MemoryMetrics(), "unused")  # another component's collector: nothing to add
    metrics.add_collector(m.collect)
    m.add(("dynamodb", "PutItem"), ("dynamodb", "WriteRequestUnits"), 2.0)
    m.add(("dynamodb", "PutItem"), ("dynamodb", "WriteRequestUnits"), 1.0)
    m.add(("autoscaling", "CompleteLifecycleAction"), None)
    metrics.flush()
    assert metrics.values("AwsRequests", Component="worker", Service="dynamodb", Operation="PutItem") == [2.0]
    assert metrics.values("AwsRequests", Service="autoscaling") == [1.0]
    assert metrics.values("AwsRequestUnits", Component="worker", Unit="WriteRequestUnits") == [3.0]
    metrics.flush()  # nothing new: nothing more
    assert len(metrics.values("AwsRequests")) == 2


def test_the_flushs_own_put_metric_data_never_makes_a_flush_of_its_own():
    m = UsageMeter("front")
    metrics = MemoryMetrics()
    metrics.add_collector(m.collect)
    put = ("monitoring", "PutMetricData")
    m.add(put, ("monitoring", "Requests"), 1.0)
    metrics.flush()  # alone: it waits
    assert metrics.values("AwsRequests") == []
    m.add(("sqs", "ReceiveMessage"), ("sqs", "Requests"), 1.0)
    metrics.flush()  # with news: both go out
    assert metrics.total("AwsRequests", Operation="PutMetricData") == 1.0
    assert metrics.total("AwsRequestUnits", Service="monitoring") == 1.0


# -- the front's HTTP requests ---------------------------------------------------------------------------
def test_the_front_counts_each_request_per_route_with_its_milliseconds():
    import time

    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    m = UsageMeter("front")
    app = FastAPI()
    app.add_middleware(HttpUsage, meter=m)

    @app.post("/v1/apps/{app_name}/frames")
    def post(app_name: str) -> dict[str, str]:
        time.sleep(0.02)
        return {"app": app_name}

    client = TestClient(app)
    for name in ("a", "b", "c"):
        assert client.post(f"/v1/apps/{name}/frames").status_code == 200
    assert client.get("/nowhere").status_code == 404
    requests, units = m.counts()
    assert requests == {
        ("apigateway", "POST /v1/apps/{app_name}/frames"): 3,  # one operation for every app
        ("apigateway", "GET unmatched"): 1,
        ("lambda", "Invocation"): 4,
    }
    # behind the HTTP API (the deployed default): priced as HTTP API requests, which WAF never sees
    assert units[("apigateway", "HttpApiRequests")] == 4 and units[("lambda", "Requests")] == 4
    assert ("apigateway", "Requests") not in units
    assert units[("lambda", "DurationMs")] >= 3 * 20  # whole milliseconds, each rounded up


def test_behind_the_rest_api_the_front_counts_rest_requests(monkeypatch):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from core.settings import front_api_from_env

    monkeypatch.setenv("SKINFLINT_FRONT_API", "REST")
    m = UsageMeter("front")
    app = FastAPI()
    app.add_middleware(HttpUsage, meter=m, api=front_api_from_env())
    assert TestClient(app).get("/x").status_code == 404
    assert m.counts()[1][("apigateway", "Requests")] == 1
    monkeypatch.setenv("SKINFLINT_FRONT_API", "soap")
    with pytest.raises(ValueError, match="SKINFLINT_FRONT_API must be http or rest"):
        front_api_from_env()
