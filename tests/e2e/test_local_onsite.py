"""Measured on the instance in the local stack (issue #27): the real CPU class's instance measures its
model before it claims, and the first epoch after boot plans the class from those entries.

A tiny ONNX model stands in for a demo model (no build needed); its registered CPU entries are
"measured" on a development host, as `skinflint models build` leaves them, so only the stack's
``onsite_profiles="all"`` makes the instance measure it: the same path a class with derived entries
takes on EC2."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import boto3
import httpx
import onnx
import pytest

from core.schema import ResultOut
from planner.models import AppModuleSpec, AppSpec, MachineGroup, ModulePlan, Plan, ProblemSpec
from profiles.onsite import ONSITE_NOTE
from skinflint.local.planning import LocalPlan
from skinflint.local.stack import LocalStack, StackConfig
from skinflint.local.video import synthetic_frames
from tests.unit.profiles.conftest import _conv_gemm_model

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RATE = 4.0  # frames/s
SLO_S = 1.0
HOST = "measured on a development host (a stand-in for the class)"


def cpu_plan(model_dir: Path):
    def plan(app: str, overhead_s: float) -> LocalPlan:
        # det: 1 real c6i.large machine, batch 2 at 6 req/s (>= 4 frames/s); 30 ms a batch
        d = 0.03 + overhead_s
        profile = [
            {"hardware": "c6i.large", "batch": b, "duration_s": 0.02 + 0.005 * b + overhead_s}
            | {"source": "measured", "note": HOST, "threads": 1}
            for b in (1, 2, 4)
        ]
        return LocalPlan(
            app=AppSpec(name=app, slo_s=SLO_S, modules={"det": AppModuleSpec(model="tiny")}, edges=[]),
            problem=ProblemSpec(
                slo_s=SLO_S,
                hardware={"c6i.large": {"price_per_hour": 0.085}},
                modules={"det": {"rate": RATE, "profile": profile}},
                edges=[],
            ),
            plan=Plan(
                objective="billed",
                cost_per_hour=0.085,
                billed_per_hour=0.085,
                solve_ms=0.0,
                modules={
                    "det": ModulePlan(
                        latency_budget_s=SLO_S,
                        worst_case_latency_s=2 / 6 + d,
                        groups=[
                            MachineGroup(
                                hardware="c6i.large", batch=2, machines=1, rate_per_machine=6.0, duration_s=d
                            )
                        ],
                    )
                },
            ),
            frame_rate=RATE,
            slo_s=SLO_S,
            emulated_hardware=[],
            model_dir=model_dir,
            overhead_s=overhead_s,
            machine_caps={"c6i.large": 1},
        )

    return plan


def test_the_real_cpu_class_is_measured_on_its_instance_and_planned_from_it(tmp_path, monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    onnx.save(_conv_gemm_model("batch"), str(models / "tiny.onnx"))
    monkeypatch.setenv("SKINFLINT_MODEL_DIR", str(models))  # the agents' model files
    stack = LocalStack(
        ["cams"], cpu_plan(models), log_dir=str(tmp_path / "logs"), config=StackConfig(onsite_budget_s=20.0)
    )
    with stack as info:
        # GIVEN the instance measured before its claim (the stack is up once every slot is served)
        aws = {"endpoint_url": info.endpoint_url, "region_name": info.region}
        creds = {"aws_access_key_id": "t", "aws_secret_access_key": "t"}
        s3 = boto3.client("s3", **aws, **creds)
        bucket = s3.list_buckets()["Buckets"][0]["Name"]
        stored = json.loads(s3.get_object(Bucket=bucket, Key="profiles/data/tiny.json")["Body"].read())
        assert stored and all(e["note"] == ONSITE_NOTE and e["hardware"] == "c6i.large" for e in stored)
        first = stack.plan_store.deployment(info.version, "cams").plan.modules["det"].groups
        for group in first:  # the batch the first plan chose, and the powers of two either side
            want = {group.batch, group.batch * 2} | ({group.batch // 2} if group.batch > 1 else set())
            assert want <= {e["batch"] for e in stored}
        measured = {e["batch"]: float(e.get("p95_s") or e["duration_s"]) for e in stored}
        # WHEN the first epoch after boot runs (the stack's timer: every 10 s)
        end = time.time() + 40
        while time.time() < end and not any(e.get("measured_on_instance") for e in stack.epochs):
            time.sleep(0.5)
        epoch = next(e for e in stack.epochs if e.get("measured_on_instance"))
        # THEN it planned the class from the measured entries, and the plan in force says so
        assert epoch["measured_on_instance"] == {"cams": {"tiny": ["c6i.large"]}}
        assert epoch["status"] == "published"
        dep = stack.plan_store.deployment(epoch["version"], "cams")
        groups = dep.plan.modules["det"].groups
        assert groups and all(g.hardware == "c6i.large" and g.batch in measured for g in groups)
        assert all(g.duration_s == pytest.approx(measured[g.batch], rel=1e-6) for g in groups)
        manifest = stack.plan_store.manifest(epoch["version"])
        assert manifest.apps["cams"].model_extra["profile_sources"] == {"det": {"c6i.large": ONSITE_NOTE}}
        # and the results name the provider and device that ran them
        with httpx.Client(base_url=info.url, timeout=10) as c:
            headers = {"x-api-key": info.api_key, "content-type": "image/jpeg"}
            ids = []
            for frame in synthetic_frames(4):
                r = c.post("/v1/apps/cams/frames", content=frame, headers=headers)
                assert r.status_code == 202, r.text
                ids.append(r.json()["accepted"][0]["request_id"])
                time.sleep(1 / RATE)
            outs = []
            for rid in ids:
                got = c.get(f"/v1/requests/{rid}", params={"wait": 10}, headers={"x-api-key": info.api_key})
                outs += [t.output for t in ResultOut.model_validate(got.json()).tasks if t.output]
        assert outs and all(
            o["provider"] == "CPUExecutionProvider" and o["device"].startswith("cpu") for o in outs
        )
    log = next((tmp_path / "logs").glob("instance-*.log")).read_text()
    assert "on-instance profiling: 1 of 1 models have no entry measured on an instance on c6i.large" in log
