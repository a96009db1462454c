"""The data plane's AWS requests end to end against moto: the components' clients (``make_client``
with a component) count their calls, the metrics flush publishes ``AwsRequests`` and
``AwsRequestUnits``, and the report prices them next to the fleet's bill (collect_report and the CLI:
table, JSON, HTML)."""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from core.adapters.metrics import CloudWatchMetrics
from core.adapters.usage import meter, report_to
from core.clients import make_client
from core.settings import DataPlaneConfig
from profiles.aws_prices import load_aws_prices
from skinflint.report import collect_report
from tests.functional.conftest import API_KEY, jpeg_bytes

pytestmark = pytest.mark.functional

P = 10  # s per period


def series_dims(cw, metric: str) -> list[dict[str, str]]:
    out = cw.list_metrics(Namespace="Skinflint", MetricName=metric)["Metrics"]
    return [{d["Name"]: d["Value"] for d in m["Dimensions"]} for m in out]


def worker_calls(cfg: DataPlaneConfig, component: str) -> None:
    """Calls of known size through a component's clients: a 1.5 KB item written (2 WRU) and read back
    strongly consistent (1 RRU), three 30 KB messages sent in one batch and received in one call
    (90 KB: 2 requests each)."""
    ddb, sqs = make_client("dynamodb", cfg, component), make_client("sqs", cfg, component)
    item = {"pk": {"S": "req#1"}, "sk": {"S": "frame"}, "v": {"S": "x" * 1500}}
    ddb.put_item(TableName=cfg.results_table, Item=item)
    ddb.get_item(TableName=cfg.results_table, Key={"pk": item["pk"], "sk": item["sk"]}, ConsistentRead=True)
    url = sqs.create_queue(QueueName="skinflint-usage-test")["QueueUrl"]
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x" * 30_000} for i in range(3)]
    )
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert len(got) == 3


def test_a_components_requests_are_published_and_priced(stack):
    cfg = stack.cfg
    meter("worker").clear()
    start = time.time() - 1
    # GIVEN a worker's metrics, flushed as the worker does
    metrics = report_to(CloudWatchMetrics(make_client("cloudwatch", cfg, "worker"), "Skinflint"), "worker")
    worker_calls(cfg, "worker")
    metrics.flush()
    cw = make_client("cloudwatch", cfg)  # the reader's own calls are not counted
    # THEN each (service, operation) is one series, with the billing units beside them
    dims = series_dims(cw, "AwsRequests")
    assert {"Component": "worker", "Service": "dynamodb", "Operation": "PutItem"} in dims
    assert {"Component": "worker", "Service": "sqs", "Operation": "SendMessageBatch"} in dims
    assert {"Component": "worker", "Service": "dynamodb", "Unit": "WriteRequestUnits"} in series_dims(
        cw, "AwsRequestUnits"
    )
    # AND the report prices them
    r = collect_report(
        cw, stack.ddb, namespace="Skinflint", config_table=cfg.config_table, prices={"t4": 0.526},
        start=start, end=time.time() + 2, period_s=P, aws_prices=load_aws_prices(), front_memory_mb=1024,
    )  # fmt: skip
    dp = r["data_plane"]
    ddb, sqs = dp["services"]["dynamodb"], dp["services"]["sqs"]
    assert ddb["operations"]["PutItem"]["requests"] == 1 and ddb["operations"]["GetItem"]["requests"] == 1
    assert ddb["billed_units"] == {"WriteRequestUnits": 2.0, "ReadRequestUnits": 1.0}
    assert ddb["usd"] == pytest.approx((2 * 0.625 + 1 * 0.125) / 1e6)
    # 3 SQS calls: CreateQueue 1, the 90 KB send 2, the 90 KB receive 2
    assert sqs["requests"] == 3 and sqs["billed_units"] == {"Requests": 5.0}
    assert sqs["usd"] == pytest.approx(5 * 0.40 / 1e6)
    assert dp["priced_at"] == "us-east-1 list prices as of 2025-01"
    assert r["total"]["data_plane_usd"] == pytest.approx(dp["usd"])
    # the flush's own PutMetricData waits for the next flush with something to say
    assert meter("worker").counts()[0] == {("monitoring", "PutMetricData"): 1.0}


def test_the_fronts_requests_api_gateway_and_lambda_are_counted_per_post(stack):
    from front.app import create_app
    from front.wiring import service_from_config

    meter("front").clear()
    start = time.time() - 1
    # GIVEN the front wired with metered clients and PutMetricData (the Lambda's EMF lines reach
    # CloudWatch through its log: test_front.py), flushed after the requests
    svc = service_from_config(stack.cfg, background_metrics=False, emf=False)
    client = TestClient(create_app(lambda: svc))
    headers = {"x-api-key": API_KEY, "content-type": "image/jpeg"}
    for _ in range(3):
        r = client.post("/v1/apps/traffic/frames", content=jpeg_bytes(), headers=headers)
        assert r.status_code == 202, r.text
    svc.metrics.flush()
    r = collect_report(
        make_client("cloudwatch", stack.cfg), stack.ddb, namespace="Skinflint",
        config_table=stack.cfg.config_table, prices={}, start=start, end=time.time() + 2, period_s=P,
        aws_prices=load_aws_prices(), front_memory_mb=1024,
    )  # fmt: skip
    dp, svcs = r["data_plane"], r["data_plane"]["services"]
    assert r["apps"]["traffic"]["frames"] == 3
    assert svcs["apigateway"]["operations"]["POST /v1/apps/{app_name}/frames"]["requests"] == 3
    # behind the HTTP API (the deployed default): HTTP API requests, and no WAF to inspect them
    assert svcs["apigateway"]["billed_units"] == {"HttpApiRequests": 3.0} and "wafv2" not in svcs
    assert svcs["lambda"]["operations"]["Invocation"]["requests"] == 3
    lam = svcs["lambda"]["billed_units"]
    assert lam["Requests"] == 3 and 0 < lam["GBSeconds"] == pytest.approx(
        svcs["lambda"]["units"]["DurationMs"] / 1e3
    )
    # what each POST did: its frame items written (BatchWriteItem) and its messages sent
    assert svcs["dynamodb"]["operations"]["BatchWriteItem"]["requests"] == 3
    assert svcs["dynamodb"]["billed_units"]["WriteRequestUnits"] >= 3
    assert svcs["sqs"]["operations"]["SendMessageBatch"]["requests"] == 3
    assert dp["usd_per_1000_frames"] == pytest.approx(dp["usd"] / 3 * 1000)
    assert set(dp["components"]) == {"front"}


def test_the_cli_prints_the_data_plane_table_json_and_html(tmp_path, capsys, moto_url):
    from skinflint.cli import main

    url = moto_url
    cfg = DataPlaneConfig(endpoint_url=url)
    meter("instance").clear()
    metrics = report_to(
        CloudWatchMetrics(make_client("cloudwatch", cfg, "instance"), "Skinflint"), "instance"
    )
    metrics.put("InstanceSeconds", 10.0, "Seconds", Hardware="t4", State="serving")
    metrics.put("FramesAccepted", 2, App="traffic")
    worker_calls(cfg, "instance")
    metrics.flush()
    assert main(["report", "--endpoint", url, "--since", "5m"]) == 0
    text = capsys.readouterr().out
    assert (
        main(["report", "--endpoint", url, "--since", "5m", "--json", "--html", str(tmp_path / "r.html")])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert "Data plane (AWS requests), priced at us-east-1 list prices as of 2025-01" in " ".join(
        text.split()
    )
    assert "fleet + data plane" in text and "dynamodb" in text
    dp = out["data_plane"]
    assert dp["services"]["dynamodb"]["billed_units"] == {"WriteRequestUnits": 2.0, "ReadRequestUnits": 1.0}
    assert dp["usd_per_1000_frames"] == pytest.approx(dp["usd"] / 2 * 1000)
    t = out["total"]
    assert t["usd"] == pytest.approx(t["fleet_usd"] + t["data_plane_usd"]) and t["fleet_usd"] > 0
    page = (tmp_path / "r.html").read_text()
    assert "Data plane (AWS requests), priced at us-east-1 list prices as of 2025-01" in page
    assert "<td>sqs</td>" in page and "fleet + data plane" in page
