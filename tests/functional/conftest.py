"""moto-backed fixtures: fake credentials first, ``mock_aws`` started before any client is made."""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from core.adapters.blobs import BlobStore
from core.adapters.config_store import ConfigStore
from core.adapters.metrics import MemoryMetrics
from core.adapters.plan_store import PlanStore
from core.adapters.queues import TaskQueues
from core.adapters.results import ResultStore
from core.routing import Router
from core.settings import DataPlaneConfig
from planner.models import AppModuleSpec, AppSpec, MachineGroup, ModulePlan, Plan
from skinflint.local.provision import create_base
from tests.functional._deploy import publish_app

if TYPE_CHECKING:
    from core.schema import Assignment, Deployment

API_KEY = "test-key-123"


@pytest.fixture(autouse=True)
def _fake_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SECURITY_TOKEN": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SKINFLINT_ENDPOINT_URL", raising=False)


@pytest.fixture
def moto_url() -> Any:
    """A moto server on a free local port with the base resources (config and results tables, the
    bucket) of ``DataPlaneConfig(endpoint_url=url)``: its URL, for commands that take ``--endpoint``."""
    import boto3
    from moto.server import ThreadedMotoServer

    from skinflint.local.stack import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        url = f"http://127.0.0.1:{port}"
        clients = (boto3.client(s, region_name="us-east-1", endpoint_url=url) for s in ("dynamodb", "s3"))
        create_base(*clients, DataPlaneConfig(endpoint_url=url))
        yield url
    finally:
        server.stop()


def two_module_app() -> AppSpec:
    # detector -> car with 1.5 cars per frame on average
    return AppSpec(
        name="traffic",
        slo_s=2.0,
        modules={"detector": AppModuleSpec(model="det"), "car": AppModuleSpec(model="car")},
        edges=[("detector", "car", 1.5)],
    )


def two_module_plan() -> Plan:
    # detector: one emulated t4 machine, batch 2 at 4 req/s -> windows of 2/4 = 0.5 s
    # car: two cpu machines, batch 3 at 3 req/s each -> W = 6, windows of 3/6 = 0.5 s
    return Plan(
        objective="billed",
        cost_per_hour=1.0,
        billed_per_hour=1.0,
        solve_ms=0.1,
        modules={
            "detector": ModulePlan(
                latency_budget_s=1.0,
                worst_case_latency_s=0.51,
                groups=[
                    MachineGroup(hardware="t4", batch=2, machines=1, rate_per_machine=4.0, duration_s=0.01)
                ],
            ),
            "car": ModulePlan(
                latency_budget_s=1.0,
                worst_case_latency_s=0.51,
                groups=[
                    MachineGroup(hardware="cpu", batch=3, machines=2, rate_per_machine=3.0, duration_s=0.01)
                ],
            ),
        },
    )


@dataclass
class Stack:
    cfg: DataPlaneConfig
    ddb: Any
    sqs: Any
    s3: Any
    store: ConfigStore
    plans: PlanStore
    results: ResultStore
    queues: TaskQueues
    blobs: BlobStore
    metrics: MemoryMetrics
    deployment: Deployment
    assignments: list[Assignment]
    dlq: str

    def router(self) -> Router:
        return Router.for_deployment(self.deployment)

    def assignment(self, module: str, group: int = 0, machine: int = 0) -> Assignment:
        return next(a for a in self.assignments if (a.module, a.group, a.machine) == (module, group, machine))

    def messages(self, url: str) -> list[dict[str, Any]]:
        out = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
        return out.get("Messages", [])

    def all_queue_depths(self) -> dict[str, int]:
        return {url: self.queues.depth(url) for qs in self.deployment.queues.values() for url in qs.values()}


@pytest.fixture
def stack() -> Any:
    yield from _stack("pull")


@pytest.fixture
def push_stack() -> Any:
    """The stack with the traffic app's results pushed to its results queue (docs/dataplane.md)."""
    yield from _stack("push")


def _stack(results: str) -> Any:
    import boto3
    from moto import mock_aws

    with mock_aws():
        cfg = DataPlaneConfig(inline_limit_bytes=200 * 1024, max_body_bytes=512 * 1024)
        ddb, sqs, s3 = (boto3.client(s, region_name=cfg.region) for s in ("dynamodb", "sqs", "s3"))
        create_base(ddb, s3, cfg)
        store = ConfigStore(ddb, cfg.config_table)
        store.put_api_key(API_KEY, "tests")
        plans = PlanStore(ddb, cfg.config_table)
        published = publish_app(
            plans,
            sqs,
            two_module_app(),
            two_module_plan(),
            frame_rate=4.0,
            emulated_hardware=["t4", "cpu"],
            origin_s=time.time() - 100.0,
            activate_at=time.time() - 100.0,
            visibility_timeout_s=1,
            results=results,
        )
        yield Stack(
            cfg=cfg,
            ddb=ddb,
            sqs=sqs,
            s3=s3,
            store=store,
            plans=plans,
            results=ResultStore(ddb, cfg.results_table),
            queues=TaskQueues(sqs),
            blobs=BlobStore(s3, cfg.bucket),
            metrics=MemoryMetrics(),
            deployment=published.deployment,
            assignments=published.assignments,
            dlq=published.dlq,
        )


def jpeg_bytes(width: int = 64, height: int = 48, seed: int = 0) -> bytes:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 255, size=(height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def png_bytes() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 200, 30)).save(buf, format="PNG")
    return buf.getvalue()
