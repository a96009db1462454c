"""The front API against moto: validation, auth, and what lands in which queue."""

from __future__ import annotations

import base64
import json

import pytest
from fastapi.testclient import TestClient

from core import wire
from core.schema import TaskMessage
from front.admission import Admission
from front.app import create_app
from front.service import FrontService
from tests.functional.conftest import API_KEY, jpeg_bytes, png_bytes

pytestmark = pytest.mark.functional

AUTH = {"x-api-key": API_KEY}


def _service(stack, **extra) -> FrontService:
    return FrontService(
        config=stack.cfg,
        store=stack.store,
        plans=stack.plans,
        results=stack.results,
        queues=stack.queues,
        blobs=stack.blobs,
        metrics=stack.metrics,
        **extra,
    )


@pytest.fixture
def client(stack):
    svc = _service(stack)
    return TestClient(create_app(lambda: svc))


def _queued(stack) -> int:
    return sum(stack.all_queue_depths().values())


def test_healthz_needs_no_key(client):
    assert client.get("/healthz").json() == {"ok": True}


def test_openapi_lists_the_routes(client):
    paths = client.get("/openapi.json", headers=AUTH).json()["paths"]
    assert {"/v1/apps/{app_name}/frames", "/v1/requests/{request_id}", "/v1/apps", "/healthz"} <= set(paths)
    assert client.get("/docs", headers=AUTH).status_code == 200
    assert client.get("/openapi.json").status_code == 401  # behind the key (SKINFLINT_FRONT_DOCS=key)


@pytest.mark.parametrize(
    ("headers", "status", "error"),
    [({}, 401, "missing_api_key"), ({"x-api-key": "nope"}, 403, "wrong_api_key")],
)
def test_key_is_required_and_checked(client, stack, headers, status, error):
    r = client.post(
        "/v1/apps/traffic/frames", content=jpeg_bytes(), headers={**headers, "content-type": "image/jpeg"}
    )
    assert r.status_code == status
    assert r.json()["error"] == error and r.json()["reason"]
    assert client.get("/v1/apps", headers=headers).status_code == status
    assert _queued(stack) == 0
    assert stack.metrics.total("FrontRejected", Reason=error) == 2


def test_list_apps(client):
    apps = client.get("/v1/apps", headers=AUTH).json()["apps"]
    assert [a["name"] for a in apps] == ["traffic"]
    assert apps[0]["roots"] == ["detector"] and apps[0]["emulated_hardware"] == ["cpu", "t4"]
    assert apps[0]["planning_slo_s"] == apps[0]["slo_s"]  # no admission_reserve


def test_jpeg_frame_lands_in_its_slots_queue(client, stack):
    # GIVEN the router's decision for "now" (windows are 0.5 s long, so the slot is stable enough)
    r = client.post(
        "/v1/apps/traffic/frames", content=jpeg_bytes(), headers={**AUTH, "content-type": "image/jpeg"}
    )
    assert r.status_code == 202, r.text
    (acc,) = r.json()["accepted"]
    assert acc["modules"] == ["detector"]
    # THEN exactly one message, in the detector queue of machine (0, 0), with the schema's fields
    url = stack.deployment.queues["detector"]["0/0"]
    (raw,) = stack.messages(url)
    msg = TaskMessage.parse(raw["Body"])
    assert msg.request_id == acc["request_id"] and msg.task_id == "detector"
    assert msg.idempotency_key == f"{acc['request_id']}/detector"
    assert msg.deadline == pytest.approx(acc["deadline"]) == pytest.approx(msg.accepted_at + 2.0)
    assert msg.accepted_at < msg.window_end <= msg.accepted_at + 0.5 + 1e-6
    assert msg.payload.inline_b64 and base64.b64decode(msg.payload.inline_b64) == jpeg_bytes()
    assert _queued(stack) == 1
    # AND the frame is recorded as queued
    got = client.get(f"/v1/requests/{acc['request_id']}", headers=AUTH).json()
    assert got["status"] == "queued" and got["tasks"] == []
    assert stack.metrics.total("FramesAccepted") == 1
    assert len(stack.metrics.values("DispatchMs")) == 1


def test_png_and_json_batch_forms(client, stack):
    assert (
        client.post(
            "/v1/apps/traffic/frames", content=png_bytes(), headers={**AUTH, "content-type": "image/png"}
        ).status_code
        == 202
    )
    body = {
        "frames": [
            {"image_b64": base64.b64encode(jpeg_bytes(seed=1)).decode()},
            {"image_b64": base64.b64encode(png_bytes()).decode(), "content_type": "image/png"},
        ]
    }
    r = client.post("/v1/apps/traffic/frames", json=body, headers=AUTH)
    assert r.status_code == 202, r.text
    assert len(r.json()["accepted"]) == 2
    assert _queued(stack) == 3


def test_a_post_of_ten_frames_is_one_message_per_root_queue(client, stack):
    # GIVEN a POST of ten frames (the JSON batch form's limit)
    body = {"frames": [{"image_b64": base64.b64encode(jpeg_bytes(seed=i)).decode()} for i in range(10)]}
    r = client.post("/v1/apps/traffic/frames", json=body, headers=AUTH)
    assert r.status_code == 202, r.text
    ids = [a["request_id"] for a in r.json()["accepted"]]
    # THEN the detector queue holds one message (core/wire.py's v2 body) carrying the ten root tasks
    url = stack.deployment.queues["detector"]["0/0"]
    (raw,) = stack.messages(url)
    tasks = wire.decode(raw["Body"])
    assert json.loads(raw["Body"])["v"] == 2
    assert [t.request_id for t in tasks] == ids and {t.task_id for t in tasks} == {"detector"}
    assert len({t.payload.inline_b64 for t in tasks}) == 10  # each frame's own bytes, carried once
    # AND its depth reads in tasks: one message of ten, as the front packed it
    assert stack.queues.depth_messages(url) == 1 and _queued(stack) == 10


@pytest.mark.parametrize(
    ("kwargs", "status", "error"),
    [
        ({"content": jpeg_bytes(), "headers": {"content-type": "text/plain"}}, 415, "unsupported_media_type"),
        (
            {"content": b"\xff\xd8garbage", "headers": {"content-type": "image/jpeg"}},
            422,
            "undecodable_image",
        ),
        ({"content": png_bytes(), "headers": {"content-type": "image/jpeg"}}, 422, "undecodable_image"),
        (
            {"content": jpeg_bytes()[:200], "headers": {"content-type": "image/jpeg"}},
            422,
            "undecodable_image",
        ),
        ({"content": b"", "headers": {"content-type": "image/jpeg"}}, 400, "empty_body"),
        ({"content": b"x" * (600 * 1024), "headers": {"content-type": "image/jpeg"}}, 413, "too_large"),
        ({"content": b"{not json", "headers": {"content-type": "application/json"}}, 400, "malformed_json"),
        ({"json": {"frames": []}}, 400, "malformed_json"),
        ({"json": {"frames": [{"image_b64": "%%%"}]}}, 400, "malformed_json"),
        ({"json": {"frames": [{"image_b64": "aGVsbG8="}]}}, 422, "undecodable_image"),
    ],
)
def test_bad_input_is_a_4xx_with_a_reason_and_nothing_is_enqueued(client, stack, kwargs, status, error):
    headers = {**AUTH, **kwargs.pop("headers", {})}
    r = client.post("/v1/apps/traffic/frames", headers=headers, **kwargs)
    assert r.status_code == status, r.text
    assert r.json()["error"] == error and r.json()["reason"]
    assert _queued(stack) == 0
    assert stack.metrics.total("FrontRejected", Reason=error) == 1


def test_one_bad_frame_rejects_the_whole_json_batch(client, stack):
    body = {"frames": [{"image_b64": base64.b64encode(jpeg_bytes()).decode()}, {"image_b64": "aGVsbG8="}]}
    assert client.post("/v1/apps/traffic/frames", json=body, headers=AUTH).status_code == 422
    assert _queued(stack) == 0


def test_unknown_app_and_unknown_request(client, stack):
    r = client.post(
        "/v1/apps/nope/frames", content=jpeg_bytes(), headers={**AUTH, "content-type": "image/jpeg"}
    )
    assert (r.status_code, r.json()["error"]) == (404, "unknown_app")
    r = client.get("/v1/requests/abc", headers=AUTH)
    assert (r.status_code, r.json()["error"]) == (404, "unknown_request")
    assert client.get("/v1/requests/abc?wait=99", headers=AUTH).json()["error"] == "invalid_request"
    assert _queued(stack) == 0


def test_large_frame_goes_to_s3_with_a_pointer(client, stack):
    # GIVEN an inline limit below the frame's base64 size
    stack.cfg.__dict__["inline_limit_bytes"] = 1000  # frozen dataclass: tests poke the field directly
    big = jpeg_bytes(width=200, height=150, seed=3)
    r = client.post("/v1/apps/traffic/frames", content=big, headers={**AUTH, "content-type": "image/jpeg"})
    assert r.status_code == 202, r.text
    (raw,) = stack.messages(stack.deployment.queues["detector"]["0/0"])
    msg = TaskMessage.parse(raw["Body"])
    assert msg.payload.inline_b64 is None and msg.payload.s3_key
    assert stack.blobs.get(msg.payload.s3_key) == big
    assert len(raw["Body"]) < 1000


def test_mangum_handler_serves_api_gateway_events(stack, monkeypatch):
    from pathlib import Path

    for k, v in stack.cfg.to_env().items():
        monkeypatch.setenv(k, v)
    import functions.front as lambda_handler

    events = Path(__file__).parents[1] / "events"
    health = json.loads((events / "healthz.json").read_text())
    out = lambda_handler.handler(health, None)
    assert out["statusCode"] == 200 and json.loads(out["body"]) == {"ok": True}

    post = json.loads((events / "post_frame.json").read_text())
    post["headers"]["x-api-key"] = API_KEY
    post["body"] = base64.b64encode(jpeg_bytes()).decode()
    out = lambda_handler.handler(post, None)
    assert out["statusCode"] == 202, out["body"]
    assert json.loads(out["body"])["accepted"][0]["modules"] == ["detector"]

    post["headers"]["x-api-key"] = "wrong"
    assert lambda_handler.handler(post, None)["statusCode"] == 403


def test_mangum_handler_serves_the_rest_apis_proxy_events(stack, monkeypatch):
    """The deployed API is a REST API (cdk/stacks/front.py: ``{proxy+}`` on stage ``live``, JPEG and
    PNG as binary media types): its payload format 1.0, not the HTTP API's 2.0 above."""
    from pathlib import Path

    for k, v in stack.cfg.to_env().items():
        monkeypatch.setenv(k, v)
    import functions.front as lambda_handler

    lambda_handler.app.state.service_holder.clear()
    try:
        post = json.loads((Path(__file__).parents[1] / "events" / "post_frame_rest.json").read_text())
        post["headers"]["x-api-key"] = post["multiValueHeaders"]["x-api-key"][0] = API_KEY
        post["body"] = base64.b64encode(jpeg_bytes()).decode()
        out = lambda_handler.handler(post, None)
        assert out["statusCode"] == 202, out["body"]
        assert json.loads(out["body"])["accepted"][0]["modules"] == ["detector"]
        post["headers"]["x-api-key"] = post["multiValueHeaders"]["x-api-key"][0] = "wrong"
        assert lambda_handler.handler(post, None)["statusCode"] == 403
    finally:
        lambda_handler.app.state.service_holder.clear()


def test_the_deployed_front_counts_each_window_in_dynamodb(stack, monkeypatch):
    """With ``SKINFLINT_ADMISSION_SHARED=on`` (the CDK front's setting) a frame the Lambda handler
    admits is counted in its window's ``slot#`` item, which every other front instance reads."""
    from pathlib import Path

    for k, v in stack.cfg.to_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SKINFLINT_ADMISSION_SHARED", "on")
    import functions.front as lambda_handler

    lambda_handler.app.state.service_holder.clear()
    try:
        post = json.loads((Path(__file__).parents[1] / "events" / "post_frame.json").read_text())
        post["headers"]["x-api-key"] = API_KEY
        post["body"] = base64.b64encode(jpeg_bytes()).decode()
        out = lambda_handler.handler(post, None)
        assert out["statusCode"] == 202, out["body"]
    finally:
        lambda_handler.app.state.service_holder.clear()
    items = stack.ddb.scan(TableName=stack.cfg.results_table)["Items"]
    slots = [i for i in items if i["pk"]["S"].startswith("slot#")]
    assert len(slots) == 1 and slots[0]["n"] == {"N": "1"}
    prefix = f"slot#{stack.deployment.app}#v{stack.deployment.version}#detector#"
    assert slots[0]["pk"]["S"].startswith(prefix) and slots[0]["pk"]["S"][len(prefix) :].isdigit()
    assert slots[0]["sk"]["S"] == "n"  # one partition key per window: no hot key


def test_the_lambda_front_writes_its_metrics_as_emf_lines_and_the_planner_reads_them(
    stack, monkeypatch, capsys
):
    """The deployed front makes no PutMetricData call (one per invocation cost more than the API
    request and could be throttled); CloudWatch extracts its metrics from the EMF lines in its log.
    That extraction, emulated as the local stack does (``skinflint.local.emf``), gives the
    planner's reader every frame accepted."""
    import time
    from pathlib import Path

    import boto3

    from core.adapters.rates import ObservedRates, RateWindow
    from skinflint.local.emf import metric_data
    from tests.unit.core.test_emf_metrics import extract

    for k, v in stack.cfg.to_env().items():
        monkeypatch.setenv(k, v)
    import functions.front as lambda_handler

    lambda_handler.app.state.service_holder.clear()  # a service built by another test's moto
    try:
        post = json.loads((Path(__file__).parents[1] / "events" / "post_frame.json").read_text())
        post["headers"]["x-api-key"] = API_KEY
        post["body"] = base64.b64encode(jpeg_bytes()).decode()
        capsys.readouterr()
        t0 = time.time()
        for _ in range(3):
            assert lambda_handler.handler(post, None)["statusCode"] == 202
        lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith('{"_aws"')]
    finally:
        lambda_handler.app.state.service_holder.clear()
    assert len(lines) >= 3  # at least one line per invocation: each flushes before it returns
    ns = stack.cfg.metrics_namespace
    series = extract(lines)
    accepted = [v for (n, name, _, dims, _), v in series.items() if name == "FramesAccepted"]
    assert sum(v[1] for v in accepted) == 3
    assert all(k[0] == ns for k in series)
    cw = boto3.client("cloudwatch", region_name=stack.cfg.region)
    assert cw.list_metrics(Namespace=ns)["Metrics"] == []  # nothing went through the API

    for line in lines:  # CloudWatch's extraction, as the local stack emulates it
        for namespace, data in metric_data(json.loads(line)).items():
            cw.put_metric_data(Namespace=namespace, MetricData=data)
    window = RateWindow(now=t0 + 120, window_s=120, period_s=60)
    assert ObservedRates(cw, ns).frame_rates(["traffic"], window) == {"traffic": pytest.approx(3 / 120)}


def test_a_warm_front_has_every_deployed_app_ready_before_its_first_frame(stack):
    """``create_app(..., warm=True)`` (the local front) builds the service, the routers and the
    admission state at startup; nothing is enqueued by warming."""
    built: list[FrontService] = []

    def factory() -> FrontService:
        svc = _service(stack, admission=Admission())
        built.append(svc)
        return svc

    with TestClient(create_app(factory, warm=True)) as client:  # the context runs the lifespan
        assert len(built) == 1  # before any request
        svc = built[0]
        app = stack.deployment.app
        assert svc.admission.admitted_rate(app) is not None
        assert _queued(stack) == 0
        r = client.post(
            f"/v1/apps/{app}/frames", content=jpeg_bytes(), headers={**AUTH, "content-type": "image/jpeg"}
        )
        assert r.status_code == 202 and len(built) == 1
    assert svc.warm() == [app]  # idempotent; returns the apps warmed
