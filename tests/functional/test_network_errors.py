"""Network-level AWS failures against moto: botocore raises ``EndpointConnectionError`` /
``ReadTimeoutError`` (no answer, after the SDK's retries) from one client call; the worker logs it and
receives again, the front answers 503 with a JSON reason. Neither leaks a traceback or a bare 500."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any
from unittest.mock import patch

import pytest
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError
from fastapi.testclient import TestClient

from front.app import create_app
from tests.functional.conftest import API_KEY, jpeg_bytes
from tests.functional.test_worker import front, make_worker, run_car_workers

pytestmark = pytest.mark.functional

ENDPOINT = "http://x"
AUTH = {"x-api-key": API_KEY}


def test_a_worker_survives_an_unreachable_sqs_and_serves_the_next_message(stack, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="skinflint.worker")
    det = make_worker(stack, "detector")
    receive = stack.sqs.receive_message
    failed: list[str] = []

    def unreachable_twice(**kwargs: Any) -> Any:
        if len(failed) < 2:
            failed.append(kwargs["QueueUrl"])
            raise EndpointConnectionError(endpoint_url=ENDPOINT)
        return receive(**kwargs)

    with patch.object(stack.sqs, "receive_message", side_effect=unreachable_twice):
        # GIVEN a serving worker whose first two receives cannot reach SQS
        server = threading.Thread(target=det.serve, kwargs={"report_s": 60.0}, daemon=True)
        server.start()
        # WHEN a frame is sent
        (request_id,) = [
            a.request_id for a in front(stack).accept("traffic", [(jpeg_bytes(), "image/jpeg")]).accepted
        ]
        deadline = time.time() + 10
        while det.totals["ran"] < 1 and time.time() < deadline:
            time.sleep(0.02)
        det.stop()
        server.join(timeout=10)
    # THEN the receiver logged the failures, kept going, and the frame's task ran; its result, carried
    # by the cars it forwarded, is recorded once they run
    assert failed == [det.assignment.queue_url] * 2
    assert not server.is_alive() and not det.queue_gone
    assert det.totals["ran"] == 1
    warnings = [r.getMessage() for r in caplog.records if r.getMessage().startswith("receive failed")]
    assert len(warnings) == 2 and all(ENDPOINT in w for w in warnings)
    run_car_workers(stack)
    req = stack.results.get_request(request_id)
    assert req is not None and req.status != "queued", req
    assert [(t.module, t.status) for t in req.tasks if t.module == "detector"] == [("detector", "done")]


@pytest.mark.parametrize(
    ("client", "op", "method", "path"),
    [
        pytest.param("ddb", "get_item", "GET", "/v1/apps", id="api-key-read"),
        pytest.param("sqs", "send_message_batch", "POST", "/v1/apps/traffic/frames", id="frame-send"),
        pytest.param("ddb", "batch_write_item", "POST", "/v1/apps/traffic/frames", id="frame-record"),
        pytest.param("ddb", "query", "GET", "/v1/requests/{rid}", id="result-read"),
    ],
)
@pytest.mark.parametrize("error", [EndpointConnectionError, ReadTimeoutError])
def test_the_front_answers_503_with_a_reason_when_aws_is_unreachable(
    stack, client, op, method, path, error
) -> None:
    svc = front(stack)
    app = TestClient(create_app(lambda: svc))
    if "{rid}" in path:  # a frame whose POST item exists: the read of its records is what fails
        rid = svc.accept("traffic", [(jpeg_bytes(), "image/jpeg")]).accepted[0].request_id
        path = path.format(rid=rid)
    kwargs: dict[str, Any] = (
        {"content": jpeg_bytes(), "headers": {**AUTH, "content-type": "image/jpeg"}}
        if method == "POST"
        else {"headers": AUTH}
    )
    # WHEN the call the route needs cannot reach its endpoint
    with patch.object(getattr(stack, client), op, side_effect=error(endpoint_url=ENDPOINT)) as failing:
        r = app.request(method, path, **kwargs)
    # THEN a retryable 503 with a JSON reason, not a bare 500
    assert failing.called
    assert r.status_code == 503, r.text
    assert r.json()["error"] == "unavailable" and r.json()["reason"]
    assert r.headers["Retry-After"] == "1"
    # AND once the endpoint answers again, the same route is served
    assert app.request(method, path, **kwargs).status_code in (200, 202, 404)
