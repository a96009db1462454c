"""Run-time queues are encrypted at rest: every queue the planner creates for a plan version, task
queues and dead-letter queues alike, asks for SSE-SQS and reports it.

moto, like SQS for queues created since October 2022, turns SSE-SQS on by default, so reading the
attribute back alone would pass without the code asking for it: the CreateQueue requests are
recorded too, and each must carry the attribute itself."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from moto import mock_aws

from control.queues import SSE_ATTRIBUTES, create_module_queues, ensure_app_dlq
from core.adapters.plan_store import PlanStore
from core.schema import queue_key
from core.settings import DataPlaneConfig
from skinflint.local.provision import create_base
from tests.functional._deploy import publish_app
from tests.functional.conftest import two_module_app, two_module_plan

pytestmark = pytest.mark.functional


@pytest.fixture
def sqs() -> Any:
    with mock_aws():
        client = boto3.client("sqs", region_name="us-east-1")
        client.requests = []  # type: ignore[attr-defined]

        def record(params: dict[str, Any], **_: Any) -> None:
            client.requests.append(dict(params))  # type: ignore[attr-defined]

        client.meta.events.register("provide-client-params.sqs.CreateQueue", record)
        yield client


def _sse(sqs: Any, url: str) -> str | None:
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["SqsManagedSseEnabled"])
    return attrs["Attributes"].get("SqsManagedSseEnabled")


def test_task_queues_and_dlq_ask_for_and_have_sse(sqs: Any) -> None:
    """GIVEN a module planned on two machines WHEN the planner creates its DLQ and queues THEN every
    CreateQueue asks for SSE-SQS and every queue reports it."""
    dlq_url, dlq_arn = ensure_app_dlq(sqs, "traffic")
    plan = two_module_plan()
    queues = create_module_queues(sqs, "traffic", "car", plan.modules["car"], dlq_arn=dlq_arn, version=3)
    assert len(queues) == 2
    assert len(sqs.requests) == 3
    for req in sqs.requests:
        assert req["Attributes"]["SqsManagedSseEnabled"] == "true", req["QueueName"]
    for url in [dlq_url, *queues.values()]:
        assert _sse(sqs, url) == "true", url
    # the other attributes still go through, and a retried epoch (same attributes) reuses the queue
    again = create_module_queues(sqs, "traffic", "car", plan.modules["car"], dlq_arn=dlq_arn, version=3)
    assert again == queues
    redrive = sqs.get_queue_attributes(QueueUrl=queues[queue_key(0, 0)], AttributeNames=["RedrivePolicy"])
    assert dlq_arn in redrive["Attributes"]["RedrivePolicy"]


def test_a_published_versions_queues_are_encrypted(sqs: Any) -> None:
    """Publishing a plan version (the control loop's path, which the local stack runs too) goes
    through the same factory: all its queues ask for SSE too."""
    cfg = DataPlaneConfig()
    ddb, s3 = (boto3.client(s, region_name="us-east-1") for s in ("dynamodb", "s3"))
    create_base(ddb, s3, cfg)
    published = publish_app(PlanStore(ddb, cfg.config_table), sqs, two_module_app(), two_module_plan(), 4.0)
    queues, dlq = published.deployment.queues, published.dlq
    urls = [dlq, *(u for per_module in queues.values() for u in per_module.values())]
    assert len(urls) == 1 + 1 + 2  # the DLQ, detector's machine, car's two machines
    assert SSE_ATTRIBUTES == {"SqsManagedSseEnabled": "true"}
    assert all(r["Attributes"]["SqsManagedSseEnabled"] == "true" for r in sqs.requests)
    assert all(_sse(sqs, u) == "true" for u in urls)
