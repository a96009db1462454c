"""The Lambda entry points log through Powertools (JSON lines with the Lambda context and the frame's
request id), publish its ColdStart metric once, and report SQS partial batch failures with its batch
processor. Fake stores and a fake Lambda context, no moto."""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from cdk import constants as C
from control.service import _fleet_events
from core.errors import DataPlaneError
from core.logs import LOGGER_NAME, append_keys
from functions import telemetry

if TYPE_CHECKING:
    from core.adapters.plan_store import InstanceStatus

CONTEXT = SimpleNamespace(
    function_name="skinflint-front",
    memory_limit_in_mb=512,
    invoked_function_arn="arn:aws:lambda:eu-west-1:123456789012:function:skinflint-front",
    aws_request_id="lambda-req-1",
)


@pytest.fixture(autouse=True)
def metrics_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    # POWERTOOLS_METRICS_NAMESPACE in the deployed functions (cdk/lambdas.py); the cold start is spent
    monkeypatch.setattr(telemetry.metrics.provider, "namespace", C.METRICS_NAMESPACE)
    monkeypatch.setattr(telemetry, "_cold", {"start": False})


def test_the_powertools_service_is_the_parent_of_the_project_loggers() -> None:
    assert C.SERVICE_NAME == LOGGER_NAME == telemetry.logger.service
    assert logging.getLogger("skinflint.front").parent is logging.getLogger(LOGGER_NAME)


@pytest.fixture
def json_lines(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(telemetry.logger.registered_handler, "stream", out)
    return out


def test_an_invocation_logs_json_with_its_context_and_request_id(json_lines: io.StringIO) -> None:
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        append_keys(request_id="0" * 32)
        logging.getLogger("skinflint.front").warning("a frame: %s", event["n"])
        return {"ok": True}

    wrapped = telemetry.entry_point(handler)
    assert wrapped({"n": 1}, CONTEXT) == {"ok": True}
    line = json.loads(json_lines.getvalue().splitlines()[-1])
    assert line["message"] == "a frame: 1" and line["level"] == "WARNING"
    assert line["request_id"] == "0" * 32 and line["function_request_id"] == "lambda-req-1"
    assert line["service"] == LOGGER_NAME
    # the next invocation starts without the last one's keys (no context: a test or a local call)
    logging.getLogger("skinflint.front").warning("next")
    assert json.loads(json_lines.getvalue().splitlines()[-1])["request_id"] == "0" * 32
    wrapped2 = telemetry.entry_point(lambda e, c: logging.getLogger("skinflint.front").warning("x") or {})
    wrapped2({}, None)
    assert "request_id" not in json.loads(json_lines.getvalue().splitlines()[-1])


def test_the_cold_start_metric_is_published_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(telemetry, "_cold", {"start": True})
    wrapped = telemetry.entry_point(lambda e, c: {})
    wrapped({}, CONTEXT)
    wrapped({}, CONTEXT)
    docs = [json.loads(x) for x in capsys.readouterr().out.splitlines() if '"ColdStart"' in x]
    assert len(docs) == 1
    assert docs[0]["function_name"] == "skinflint-front" and docs[0]["ColdStart"] == [1.0]


# -- fleet events: the batch processor -----------------------------------------------------------------
@dataclass
class FakePlans:
    fail_on: str = ""
    released: list[str] = field(default_factory=list)
    beats: dict[str, InstanceStatus] = field(default_factory=dict)

    def current(self) -> Any:
        return SimpleNamespace(version=2, previous=1)

    def release(self, version: int, instance: str) -> list[int]:
        if instance == self.fail_on:
            raise DataPlaneError("DynamoDB is down")
        if instance == "i-bug":
            raise KeyError("a bug")
        self.released.append(f"{version}:{instance}")
        return [0] if version == 2 else []

    def instances(self) -> dict[str, InstanceStatus]:
        return self.beats

    def put_instance(self, status: InstanceStatus) -> None:
        self.beats[status.instance_id] = status


def _notice(instance: str) -> str:
    return json.dumps(
        {"EC2InstanceId": instance, "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING"}
    )


def test_fleet_events_report_the_records_that_failed() -> None:
    plans = FakePlans(fail_on="i-2")
    ctl: Any = SimpleNamespace(plans=plans, clock=lambda: 5.0)
    records = [
        {"messageId": "a", "body": _notice("i-1")},
        {"messageId": "b", "body": _notice("i-2")},
        {"messageId": "c", "body": "not json"},
        {"messageId": "d", "body": json.dumps({"Event": "autoscaling:TEST_NOTIFICATION"})},
    ]
    out = _fleet_events(ctl, records)
    assert out["batchItemFailures"] == [{"itemIdentifier": "b"}, {"itemIdentifier": "c"}]
    assert out["released"] == {"i-1": ["v2:0"]}
    assert plans.released == ["2:i-1", "1:i-1"]


def test_fleet_events_all_failed_is_still_a_partial_response() -> None:
    ctl: Any = SimpleNamespace(plans=FakePlans(), clock=lambda: 5.0)
    out = _fleet_events(ctl, [{"messageId": "x", "body": "{"}])
    assert out == {"batchItemFailures": [{"itemIdentifier": "x"}], "released": {}}


def test_fleet_events_a_bug_fails_the_invocation() -> None:
    ctl: Any = SimpleNamespace(plans=FakePlans(), clock=lambda: 5.0)
    with pytest.raises(KeyError, match="a bug"):
        _fleet_events(ctl, [{"messageId": "x", "body": _notice("i-bug")}])
