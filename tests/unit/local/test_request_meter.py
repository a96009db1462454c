"""The local stack's AWS request meter (``skinflint/local/moto_server.py``) and the demo's
requests-per-frame figures (``skinflint/local/summary.py``)."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pytest

from skinflint.local.moto_server import METER_PATH, RequestMeter, classify
from skinflint.local.summary import aws_request_figures


def signed(service: str, **environ: Any) -> dict[str, Any]:
    auth = f"AWS4-HMAC-SHA256 Credential=AKID/20261121/us-east-1/{service}/aws4_request, SignedHeaders=host"
    return {"HTTP_AUTHORIZATION": auth, "REQUEST_METHOD": "POST", "PATH_INFO": "/", **environ}


def test_each_protocol_names_its_action() -> None:
    # JSON protocols (SQS, DynamoDB): the target header
    assert classify(signed("sqs", HTTP_X_AMZ_TARGET="AmazonSQS.SendMessageBatch")) == (
        "sqs",
        "SendMessageBatch",
    )
    assert classify(signed("dynamodb", HTTP_X_AMZ_TARGET="DynamoDB_20120810.PutItem")) == (
        "dynamodb",
        "PutItem",
    )
    # Smithy RPC v2 (CloudWatch): the path
    cw = signed("monitoring", PATH_INFO="/service/GraniteServiceVersion20100801/operation/PutMetricData")
    assert classify(cw) == ("monitoring", "PutMetricData")
    # S3 (REST): the method
    assert classify(signed("s3", REQUEST_METHOD="PUT", PATH_INFO="/bucket/key")) == ("s3", "PUT")
    assert classify({"REQUEST_METHOD": "GET", "PATH_INFO": "/moto-api/"}) == ("unsigned", "GET")


def test_a_query_protocol_body_is_read_for_its_action_and_put_back() -> None:
    body = b"Action=DescribeAutoScalingGroups&Version=2011-01-01"
    environ = signed(
        "autoscaling",
        CONTENT_TYPE="application/x-www-form-urlencoded; charset=utf-8",
        CONTENT_LENGTH=str(len(body)),
        **{"wsgi.input": io.BytesIO(body)},
    )
    assert classify(environ) == ("autoscaling", "DescribeAutoScalingGroups")
    assert environ["wsgi.input"].read() == body  # the application still reads the whole body


def test_the_meter_counts_what_it_passes_on_and_answers_its_own_path() -> None:
    seen: list[str] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(environ.get("HTTP_X_AMZ_TARGET", ""))
        start_response("200 OK", [])
        return [b"{}"]

    meter = RequestMeter(app)
    statuses: list[str] = []
    for _ in range(3):
        meter(signed("sqs", HTTP_X_AMZ_TARGET="AmazonSQS.ReceiveMessage"), lambda s, h: statuses.append(s))
    meter(signed("dynamodb", HTTP_X_AMZ_TARGET="DynamoDB_20120810.GetItem"), lambda s, h: statuses.append(s))
    got = meter({"REQUEST_METHOD": "GET", "PATH_INFO": METER_PATH}, lambda s, h: statuses.append(s))
    assert len(seen) == 4  # the meter's own answer never reaches moto
    snap = json.loads(b"".join(got))
    assert (snap["total"], snap["by_action"]) == (4, {"dynamodb.GetItem": 1, "sqs.ReceiveMessage": 3})
    assert set(snap["cpu_s_by_action"]) == set(snap["max_wall_s_by_action"]) == set(snap["by_action"])
    assert all(v >= 0 for v in snap["cpu_s_by_action"].values())
    assert snap["heavy"] == []  # nothing here takes 20 ms of CPU
    assert statuses == ["200 OK"] * 5


def test_the_meter_times_each_action_and_keeps_the_heavy_requests() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if environ.get("HTTP_X_AMZ_TARGET", "").endswith("Scan"):
            end = time.thread_time() + 0.03  # a request that holds the CPU (as moto's Scan does)
            while time.thread_time() < end:
                pass
        start_response("200 OK", [])
        return [b"{}"]

    meter = RequestMeter(app)
    t0 = time.time()
    meter(signed("dynamodb", HTTP_X_AMZ_TARGET="DynamoDB_20120810.GetItem"), lambda s, h: None)
    meter(signed("dynamodb", HTTP_X_AMZ_TARGET="DynamoDB_20120810.Scan"), lambda s, h: None)
    snap = meter.snapshot()
    assert snap["cpu_s_by_action"]["dynamodb.Scan"] >= 0.03
    assert snap["max_wall_s_by_action"]["dynamodb.Scan"] >= 0.03
    assert snap["cpu_s_by_action"]["dynamodb.GetItem"] < 0.02
    [(started, action, cpu, wall)] = snap["heavy"]
    assert action == "dynamodb.Scan" and started >= t0 and cpu >= 0.03 and wall >= cpu * 0.9


def test_an_app_error_is_still_counted() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise RuntimeError("boom")

    meter = RequestMeter(app)
    try:
        meter(signed("sqs", HTTP_X_AMZ_TARGET="AmazonSQS.ReceiveMessage"), lambda s, h: None)
    except RuntimeError:
        pass
    assert meter.snapshot()["by_action"] == {"sqs.ReceiveMessage": 1}


def test_request_figures_are_the_difference_of_two_readings_per_frame() -> None:
    before = {"total": 5, "by_action": {"sqs.SendMessageBatch": 2, "dynamodb.GetItem": 3}}
    after = {
        "total": 35,
        "by_action": {"sqs.SendMessageBatch": 22, "dynamodb.GetItem": 3, "dynamodb.PutItem": 10},
    }
    got = aws_request_figures(before, after, frames=10, seconds=5.0)
    assert got is not None
    assert got["by_action"] == {"sqs.SendMessageBatch": 20, "dynamodb.PutItem": 10}  # most first, 0s left out
    assert (got["total"], got["per_frame"], got["per_second"]) == (30, 3.0, 6.0)
    assert aws_request_figures(None, after, 10, 5.0) is None


def test_request_figures_give_the_server_cpu_per_action_and_the_heavy_requests_since() -> None:
    before = {"by_action": {"dynamodb.Scan": 1}, "cpu_s_by_action": {"dynamodb.Scan": 0.5}, "heavy": []}
    after = {
        "by_action": {"dynamodb.Scan": 3, "sqs.ReceiveMessage": 8},
        "cpu_s_by_action": {"dynamodb.Scan": 0.7, "sqs.ReceiveMessage": 0.04},
        "heavy": [[99.0, "dynamodb.Scan", 0.1, 0.12], [101.0, "dynamodb.Scan", 0.1, 0.3]],
    }
    got = aws_request_figures(before, after, frames=5, seconds=2.0, since=100.0)
    assert got is not None
    assert list(got["server_cpu_s_by_action"]) == ["dynamodb.Scan", "sqs.ReceiveMessage"]
    assert abs(got["server_cpu_s"] - 0.24) < 1e-9
    assert abs(got["server_cpu_ms_per_request"] - 24.0) < 1e-9  # 0.24 s over 10 requests
    assert got["heavy_requests"] == [[101.0, "dynamodb.Scan", 0.1, 0.3]]  # the one before `since` left out


def test_the_gc_meter_times_collections_and_keeps_the_long_ones() -> None:
    import gc

    from skinflint.local.moto_server import GcMeter

    meter = GcMeter()
    meter.LONG_S = 0.0  # keep every pause
    meter.install()
    try:
        junk = [[i] for i in range(50_000)]  # something for a full collection to walk
        t0 = time.time()
        gc.collect()
        del junk
    finally:
        gc.callbacks.remove(meter._callback)
    snap = meter.snapshot()
    full = snap["by_generation"]["2"]
    assert full["collections"] >= 1 and full["max_s"] > 0 and full["total_s"] >= full["max_s"]
    started, generation, seconds, _ = snap["long_pauses"][-1]
    assert generation == 2 and started >= t0 and seconds > 0
    wrapped = RequestMeter(lambda e, s: [b""], meter).snapshot()
    assert wrapped["gc"]["by_generation"]["2"]["collections"] == full["collections"]


def test_a_collection_during_a_snapshot_neither_waits_nor_stops_later_collections() -> None:
    # a collection triggered by the snapshot's own allocations used to wait for the snapshot's lock,
    # forever, with the collector flagged "collecting": no collection ran in the server again
    import gc
    import threading

    from skinflint.local.moto_server import GcMeter

    meter = GcMeter().install()
    threshold = gc.get_threshold()
    gc.set_threshold(1)  # every allocation of a tracked object starts a young collection
    done: list[dict] = []
    try:
        worker = threading.Thread(
            target=lambda: done.extend(meter.snapshot() for _ in range(200)), daemon=True
        )
        worker.start()
        worker.join(10)
        assert not worker.is_alive(), "a snapshot hung on a collection it triggered"
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(meter._callback)
    before = meter.snapshot()["by_generation"]["0"]["collections"]
    meter.install()
    try:
        gc.collect(0)
    finally:
        gc.callbacks.remove(meter._callback)
    assert len(done) == 200 and meter.snapshot()["by_generation"]["0"]["collections"] == before + 1


def test_the_server_freezes_what_survives_its_full_collections() -> None:
    import subprocess
    import sys

    # in a child process: the setting is the whole interpreter's
    code = (
        "import gc, time; from skinflint.local.moto_server import frozen_full_collections as f; "
        "before = gc.get_freeze_count(); t = f(0.05); time.sleep(0.3); keep = [[i] for i in range(1000)]; "
        "time.sleep(0.3); print(before, gc.get_freeze_count() > before + 1000, t.daemon, gc.get_threshold())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split(" ", 3)[:3] == ["0", "True", "True"]  # later survivors frozen too; thresholds as set


def test_the_freeze_path_collects_and_freezes_without_reaching_moto() -> None:
    import gc

    from skinflint.local.moto_server import FREEZE_PATH

    seen: list[str] = []
    meter = RequestMeter(lambda e, s: seen.append("app") or [b""])
    statuses: list[str] = []
    try:
        got = meter({"REQUEST_METHOD": "POST", "PATH_INFO": FREEZE_PATH}, lambda s, h: statuses.append(s))
        answer = json.loads(b"".join(got))
        assert statuses == ["200 OK"] and seen == []  # answered by the meter, not counted
        assert answer["frozen"] > 0 and gc.get_freeze_count() > 0 and answer["seconds"] >= 0
        assert meter.snapshot()["total"] == 0
    finally:
        gc.unfreeze()  # the test process's collector as it was


def test_the_stacks_stand_ins_for_aws_are_counted_apart() -> None:
    """The local stack's EMF extraction (what CloudWatch does by itself on AWS) marks its requests;
    the meter counts them apart, and the demo's requests per frame leave them out."""
    import boto3
    import pytest

    from skinflint.local.emf import emulation_client
    from skinflint.local.moto_server import EMULATION_HEADER

    assert classify(
        signed(
            "monitoring",
            PATH_INFO="/service/GraniteServiceVersion20100801/operation/PutMetricData",
            HTTP_X_SKINFLINT_EMULATION="emf-extraction",
        )
    ) == ("emulation-monitoring", "PutMetricData")
    # the marked client sends the header (captured before anything is sent: no network here)
    cw = emulation_client(
        boto3.client(
            "cloudwatch", region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
            aws_access_key_id="k", aws_secret_access_key="s",
        )
    )  # fmt: skip
    seen: dict[str, Any] = {}

    class Sent(Exception):
        pass

    def capture(request: Any, **_: Any) -> None:
        seen.update(request.headers)
        raise Sent

    cw.meta.events.register("before-send", capture)
    with pytest.raises(Sent):
        cw.put_metric_data(Namespace="NS", MetricData=[{"MetricName": "M", "Value": 1.0}])
    assert seen[EMULATION_HEADER] in ("emf-extraction", b"emf-extraction")  # botocore may hold bytes
    # the figures: the emulated requests are reported, not counted per frame
    before = {"by_action": {}}
    after = {"by_action": {"sqs.ReceiveMessage": 30, "emulation-monitoring.PutMetricData": 10}}
    got = aws_request_figures(before, after, frames=10, seconds=10.0)
    assert got is not None
    assert (got["total"], got["per_frame"]) == (30, 3.0)
    assert got["emulation_by_action"] == {"emulation-monitoring.PutMetricData": 10}


def test_billing_units_follow_what_aws_charges_per_request() -> None:
    from skinflint.local.moto_server import billing_units

    small = {"pk": {"S": "p"}, "sk": {"S": "post"}}
    big = {"pk": {"S": "p"}, "tasks": {"B": "x" * 2500}}  # 2.5 KB: 3 write units
    write = json.dumps(
        {"RequestItems": {"t": [{"PutRequest": {"Item": small}}, {"PutRequest": {"Item": big}}]}}
    )
    assert billing_units("dynamodb", "BatchWriteItem", write.encode(), 2) == {"dynamodb_write_units": 4}
    assert billing_units("dynamodb", "UpdateItem", b"{}", 2) == {"dynamodb_write_units": 1}
    # reads by the bytes returned: 4 KB a unit, half for an eventually consistent Query
    query = json.dumps({"TableName": "t", "ConsistentRead": False}).encode()
    assert billing_units("dynamodb", "Query", query, 9000) == {"dynamodb_read_units_eventual": 1.5}
    strong = json.dumps({"RequestItems": {"t": {"Keys": [], "ConsistentRead": True}}}).encode()
    assert billing_units("dynamodb", "BatchGetItem", strong, 100) == {"dynamodb_read_units_strong": 1}
    # SQS: one billed request per 64 KB of what a call carries
    assert billing_units("sqs", "SendMessageBatch", b"x" * 70_000, 10) == {"sqs_billed_requests": 2}
    assert billing_units("sqs", "ReceiveMessage", b"{}", 200_000) == {"sqs_billed_requests": 4}
    assert billing_units("sqs", "DeleteMessageBatch", b"{}", 10) == {"sqs_billed_requests": 1}
    assert billing_units("s3", "PUT", b"", 0) == {"s3_put_requests": 1}
    assert billing_units("s3", "GET", b"", 0) == {"s3_get_requests": 1}
    assert billing_units("s3", "DELETE", b"", 0) == {}  # free
    assert billing_units("monitoring", "PutMetricData", b"", 0) == {}


def test_the_meter_sums_billing_units_and_the_figures_divide_them_per_frame() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        environ["wsgi.input"].read()  # the application still gets the whole body
        start_response("200 OK", [])
        return [b"x" * 5000]

    meter = RequestMeter(app)
    body = json.dumps({"TableName": "t"}).encode()
    for _ in range(4):
        environ = signed(
            "dynamodb",
            HTTP_X_AMZ_TARGET="DynamoDB_20120810.Query",
            CONTENT_LENGTH=str(len(body)),
            **{"wsgi.input": io.BytesIO(body)},
        )
        meter(environ, lambda *_a: None)
    after = meter.snapshot()
    assert after["billing"]["dynamodb_read_units_eventual"] == 4.0  # 5,000 bytes: 2 units, halved
    before = {**after, "by_action": {}, "billing": {"dynamodb_read_units_eventual": 1.0}}
    got = aws_request_figures(before, after, frames=2, seconds=1.0)
    assert got is not None and got["billing_units_per_frame"]["dynamodb_read_units_eventual"] == 1.5


def test_the_demo_prices_its_measured_units_all_in_with_the_prices_date() -> None:
    from profiles.aws_prices import load_aws_prices
    from skinflint.local.summary import all_in_figures

    prices = load_aws_prices()
    units = {
        "dynamodb_write_units": 2.0,  # $0.625 per million
        "dynamodb_read_units_eventual": 0.5,  # $0.125 per million
        "sqs_billed_requests": 4.0,  # $0.40 per million
        "api_requests_post": 0.25,  # an HTTP API request ($1.00) and a Lambda invocation ($0.20) each
        "api_requests_get": 1.0,
    }
    got = all_in_figures(units, frame_rate=10.0, fleet_per_hour=1.0, prices=prices)
    per_hour = 10 * 3600 / 1e6
    assert got["data_plane"]["dynamodb"] == pytest.approx((2 * 0.625 + 0.5 * 0.125) * per_hour)
    assert got["data_plane"]["sqs"] == pytest.approx(4 * 0.40 * per_hour)
    assert got["data_plane"]["apigateway"] == pytest.approx(1.25 * 1.00 * per_hour)
    assert got["data_plane"]["lambda"] == pytest.approx(1.25 * 0.20 * per_hour)
    assert got["all_in_per_hour"] == pytest.approx(1.0 + got["data_plane_per_hour"])
    assert got["all_in_per_million_frames"] == pytest.approx(got["all_in_per_hour"] / (10 * 3600) * 1e6)
    assert "as of 2025-01" in got["prices"] and "profiles/hardware.json" in got["prices"]


def test_the_meter_counts_each_caller_by_the_app_id_in_its_user_agent() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [b"{}"]

    meter = RequestMeter(app)
    ua = "Boto3/1.35 md/Botocore#1.35 ua/2.1 os/linux#6 lang/python#3.11 app/front cfg/retry-mode#legacy"
    get = signed("dynamodb", HTTP_X_AMZ_TARGET="DynamoDB_20120810.GetItem", HTTP_USER_AGENT=ua)
    receive = signed(
        "sqs", HTTP_X_AMZ_TARGET="AmazonSQS.ReceiveMessage", HTTP_USER_AGENT="Boto3/1.35 app/instance-t4"
    )
    for environ in (get, get, receive, signed("sqs", HTTP_X_AMZ_TARGET="AmazonSQS.ReceiveMessage")):
        meter(environ, lambda s, h: None)
    snap = json.loads(b"".join(meter({"REQUEST_METHOD": "GET", "PATH_INFO": METER_PATH}, lambda s, h: None)))
    assert snap["by_caller"] == {
        "front": {"dynamodb.GetItem": 2},
        "instance-t4": {"sqs.ReceiveMessage": 1},
        "other": {"sqs.ReceiveMessage": 1},  # no app id: a client the stack did not name
    }
    # the demo's figures: per frame, by caller, between two readings
    before = {"by_action": {}, "by_caller": {"front": {"dynamodb.GetItem": 1}}}
    figures = aws_request_figures(before, snap, frames=2, seconds=1.0)
    assert figures is not None
    assert figures["by_caller_per_frame"] == {
        "front": {"total": 0.5, "dynamodb.GetItem": 0.5},
        "instance-t4": {"total": 0.5, "sqs.ReceiveMessage": 0.5},
        "other": {"total": 0.5, "sqs.ReceiveMessage": 0.5},
    }


def test_the_stack_names_each_process_for_the_meter(tmp_path: Any) -> None:
    from skinflint.local.fleet import ProcessLauncher
    from skinflint.local.moto_server import CALLER_ENV

    launcher = ProcessLauncher({"PATH": "/bin", CALLER_ENV: "stack"}, tmp_path)
    assert launcher._env("i-1", "c6i.large")[CALLER_ENV] == "instance-c6i.large"


def test_the_demo_line_names_the_requests_per_frame_of_each_process() -> None:
    from skinflint.commands.demo import _fmt_requests

    requests = {
        "total": 30,
        "per_frame": 3.0,
        "per_second": 15.0,
        "seconds": 2.0,
        "by_action": {"sqs.ReceiveMessage": 20, "dynamodb.GetItem": 10},
        "by_caller_per_frame": {"instance-t4": {"total": 2.0}, "front": {"total": 1.0}},
    }
    assert "per frame by process: instance-t4 2.00, front 1.00" in _fmt_requests(requests)
