"""The local stack's AWS request meter (``functions/localstack/moto_server.py``) and the demo's
requests-per-frame figures (``functions/localstack/summary.py``)."""

from __future__ import annotations

import io
import json
from typing import Any

from functions.localstack.moto_server import METER_PATH, RequestMeter, classify
from functions.localstack.summary import aws_request_figures


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
    assert json.loads(b"".join(got)) == {
        "total": 4,
        "by_action": {"dynamodb.GetItem": 1, "sqs.ReceiveMessage": 3},
    }
    assert statuses == ["200 OK"] * 5


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
