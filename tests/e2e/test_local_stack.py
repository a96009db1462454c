"""The local stack end to end: moto's server, the front under uvicorn, the control loop and the
emulated fleet's instance agents, the API.

Uses hand-made profiles on emulated hardware (no model build needed) so it runs anywhere in ~30 s;
``skinflint demo`` runs the same path with measured profiles."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import boto3
import httpx
import pytest

from core.schema import ResultOut
from planner.models import AppModuleSpec, AppSpec, MachineGroup, ModulePlan, Plan, ProblemSpec
from skinflint.commands.up import ready_line
from skinflint.local.planning import LocalPlan
from skinflint.local.stack import LocalStack
from skinflint.local.summary import aws_request_figures, summarise
from skinflint.local.video import synthetic_frames

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RATE = 5.0  # frames/s
SLO_S = 1.0


def stub_plan(app: str, overhead_s: float) -> LocalPlan:
    # detector: 1 emulated t4 machine, batch 2 at 6 req/s (W = 6 >= 5 frames/s): 2/6 + d
    # vehicle: 2 emulated t4 machines, batch 2 at 5 req/s each (W = 10 >= 1.5 * 5 = 7.5)
    d = 0.02 + overhead_s
    spec = AppSpec(
        name=app,
        slo_s=SLO_S,
        modules={
            "detector": AppModuleSpec(model="ssdlite_mnv2"),
            "vehicle": AppModuleSpec(model="resnet18_vehicle"),
        },
        edges=[("detector", "vehicle", 1.5)],
    )
    plan = Plan(
        objective="billed",
        cost_per_hour=1.0,
        billed_per_hour=1.578,
        solve_ms=0.0,
        modules={
            "detector": ModulePlan(
                latency_budget_s=0.5,
                worst_case_latency_s=2 / 6 + d,
                groups=[MachineGroup(hardware="t4", batch=2, machines=1, rate_per_machine=6.0, duration_s=d)],
            ),
            "vehicle": ModulePlan(
                latency_budget_s=0.5,
                worst_case_latency_s=2 / 10 + d,
                groups=[MachineGroup(hardware="t4", batch=2, machines=2, rate_per_machine=5.0, duration_s=d)],
            ),
        },
    )
    problem = ProblemSpec(
        slo_s=SLO_S,
        hardware={"t4": {"price_per_hour": 0.526}},
        modules={
            "detector": {"rate": RATE, "profile": [{"hardware": "t4", "batch": 2, "duration_s": d}]},
            "vehicle": {"rate": 1.5 * RATE, "profile": [{"hardware": "t4", "batch": 2, "duration_s": d}]},
        },
        edges=[("detector", "vehicle")],
    )
    return LocalPlan(
        app=spec,
        problem=problem,
        plan=plan,
        frame_rate=RATE,
        slo_s=SLO_S,
        emulated_hardware=["t4"],
        model_dir=Path("/nonexistent"),
        overhead_s=overhead_s,
    )


def test_frames_flow_through_the_local_stack_and_every_process_stops(tmp_path):
    stack = LocalStack(["traffic"], stub_plan, log_dir=str(tmp_path))
    with stack as info:
        assert info.api_key and info.url.startswith("http://127.0.0.1:")
        # `skinflint up --json` prints the local AWS endpoint (moto) too, and other programs can read
        # the stack's resources through it with any credentials
        line = json.loads(ready_line(info, as_json=True))
        assert set(line) == {"url", "api_key", "apps", "aws_endpoint", "region"}
        assert (line["url"], line["api_key"], line["apps"]) == (info.url, info.api_key, ["traffic"])
        assert line["aws_endpoint"].startswith("http://127.0.0.1:") and line["region"] == "us-east-1"
        assert f"AWS (moto) at {line['aws_endpoint']} region us-east-1" in ready_line(info, as_json=False)
        aws = {"endpoint_url": line["aws_endpoint"], "region_name": line["region"]}
        creds = {"aws_access_key_id": "other-program", "aws_secret_access_key": "other-program"}
        assert "skinflint-config" in boto3.client("dynamodb", **aws, **creds).list_tables()["TableNames"]
        sqs = boto3.client("sqs", **aws, **creds)
        task_queues = sqs.list_queues(QueueNamePrefix="skinflint-traffic-")["QueueUrls"]
        assert task_queues
        for url in task_queues:  # the task queues and the DLQ, encrypted at rest
            attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["SqsManagedSseEnabled"])
            assert attrs["Attributes"]["SqsManagedSseEnabled"] == "true", url
        before = stack.aws_requests()
        assert before is not None and before["total"] > 0
        pids = stack.pids()
        instances = sum(len(g["running"]) for g in stack.fleet.snapshot().values())
        assert instances >= 1 and len(pids) == 1 + 1 + instances  # moto, front, the instance agents
        with httpx.Client(base_url=info.url, timeout=10) as c:
            assert c.get("/healthz").json() == {"ok": True}
            assert c.get("/v1/apps").status_code == 401
            apps = c.get("/v1/apps", headers={"x-api-key": info.api_key}).json()["apps"]
            assert apps[0]["emulated_hardware"] == ["t4"]
            # WHEN 4 s of video is streamed at the planned rate
            frames = synthetic_frames(20)
            ids = []
            start = time.time()
            for k, f in enumerate(frames):
                time.sleep(max(0.0, start + k / RATE - time.time()))
                r = c.post(
                    "/v1/apps/traffic/frames",
                    content=f,
                    headers={"x-api-key": info.api_key, "content-type": "image/jpeg"},
                )
                assert r.status_code == 202, r.text
                ids.append(r.json()["accepted"][0]["request_id"])
            bad = c.post(
                "/v1/apps/traffic/frames",
                content=b"nope",
                headers={"x-api-key": info.api_key, "content-type": "image/jpeg"},
            )
            assert bad.status_code == 422
            results = []
            for rid in ids:
                r = c.get(f"/v1/requests/{rid}", params={"wait": 10}, headers={"x-api-key": info.api_key})
                results.append(ResultOut.model_validate(r.json()))
        # moto's meter saw the frames' path: the front's sends, the workers' receives and writes
        used = aws_request_figures(before, stack.aws_requests(), len(ids), 1.0)
        assert used is not None, "moto's request meter did not answer"
        for action in (
            "sqs.SendMessageBatch",
            "sqs.ReceiveMessage",
            "dynamodb.PutItem",
            "sqs.DeleteMessageBatch",
        ):
            assert used["by_action"].get(action, 0) > 0, used
    # THEN nothing is lost, results are labelled emulated, and the stack's processes are gone
    s = summarise(len(ids), results, info.plans["traffic"].plan, SLO_S, ["t4"])
    assert s["lost"] == 0, s
    assert s["answered"] + s["dropped"] == len(ids)
    assert s["slo_attainment"] >= 0.9, s
    assert all(t.emulated for r in results for t in r.tasks)
    assert s["modules"]["vehicle"]["tasks"] >= len(ids)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert "Traceback" not in (tmp_path / "front.log").read_text()


def test_an_instance_agent_sigterm_drains_and_exits_cleanly(tmp_path):
    stack = LocalStack(["traffic"], stub_plan, log_dir=str(tmp_path))
    with stack:
        iid, inst = next(iter(stack.fleet._instances.items()))
        inst.agent.send_signal(signal.SIGTERM)
        assert inst.agent.wait(timeout=15) == 0
        text = (tmp_path / f"instance-{iid}.log").read_text()
        assert "stopped:" in text and "drained (sigterm)" in text


def test_a_moto_failure_during_the_hop_probe_is_one_line_and_stops_the_stack(tmp_path, monkeypatch):
    """An AWS failure inside the stack's own start-up (here the hop probe: moto unreachable) is a
    StackError naming moto, which `skinflint up` prints as one line; nothing is left running."""
    from botocore.exceptions import EndpointConnectionError

    from skinflint.local.stack import StackError

    def unreachable(self, sqs, ddb):
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")

    monkeypatch.setattr(LocalStack, "_overhead", unreachable)
    stack = LocalStack(["traffic"], stub_plan, log_dir=str(tmp_path))
    with pytest.raises(StackError, match="hop probe against moto .* failed: Could not connect"):
        stack.start()
    assert all(proc.poll() is not None for _, proc, _ in stack._procs)  # moto was stopped
