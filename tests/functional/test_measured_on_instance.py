"""Measured on the instance, end to end on moto (issue #27): an app registered with derived entries
only on its CPU class is planned from them (with the margin); an instance of the class measures the
planned model on this machine's CPU with onnxruntime before it claims, into the shared profile store
(S3); the next epoch re-plans from the measured entries, and ``skinflint status`` and
``skinflint apps show`` say "measured on instance"."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import onnx
import pytest

from control.epoch import ControlConfig
from control.problems import DERIVED_MARGIN
from control.service import PROFILES_PREFIX, Registrar, build_controller, profile_store
from core.adapters.metrics import MemoryMetrics
from core.settings import DataPlaneConfig
from profiles.onsite import ONSITE_NOTE
from skinflint.local.provision import create_base
from tests.unit.profiles.conftest import _conv_gemm_model
from workers.instance import PROFILES_PREFIX as WORKER_PROFILES_PREFIX
from workers.onsite import BeforeClaim, instance_info
from workers.runtimes import EmulatedRuntime, device_name
from workers.shares import RuntimeCache

pytestmark = pytest.mark.functional

# derived only on c6i.large: 40 ms + 10 ms per frame (far slower than the tiny model really runs)
SPEC: dict[str, Any] = {
    "name": "cams",
    "slo_s": 1.0,
    "rate": 4.0,
    "modules": {"det": {"model": "tiny"}},
    "hardware": ["c6i.large"],
    "profiles": {
        "tiny": [
            {"hardware": "c6i.large", "batch": b, "duration_s": 0.04 + 0.01 * b, "source": "derived"}
            for b in (1, 2, 4, 8)
        ]
    },
}


@pytest.fixture
def env(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    import boto3
    from moto import mock_aws

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        session = boto3.session.Session()
        clients = {
            n: session.client(n, region_name="us-east-1") for n in ("dynamodb", "s3", "sqs", "cloudwatch")
        }
        cfg = DataPlaneConfig()
        create_base(clients["dynamodb"], clients["s3"], cfg)
        clock = [math.floor(time.time() / 60) * 60 - 3600 + 30.0]
        ctl = build_controller(cfg, ControlConfig(), clients=clients, clock=lambda: clock[0])
        ctl.metrics = MemoryMetrics()
        Registrar(ctl.registry, ctl.states, ctl.catalog, lambda _m: None).register(SPEC, now=clock[0])
        path = tmp_path / "tiny.onnx"
        onnx.save(_conv_gemm_model("batch"), str(path))
        yield ctl, clients, cfg, clock, str(path)


def _frames(cw: Any, cfg: DataPlaneConfig, now: float, rate: float) -> None:
    """``rate`` frames/s accepted during the window the next epoch (60 s on) reads."""
    start = math.floor((now + 60) / 60) * 60 - 60
    cw.put_metric_data(
        Namespace=cfg.metrics_namespace,
        MetricData=[
            {
                "MetricName": "FramesAccepted",
                "Dimensions": [{"Name": "App", "Value": "cams"}],
                "Timestamp": start + 5,
                "StatisticValues": {"SampleCount": 1, "Sum": rate * 60, "Minimum": 0, "Maximum": 1},
            }
        ],
    )


def _durations(plan: Any) -> dict[tuple[str, int], float]:
    return {(g.hardware, g.batch): g.duration_s for g in plan.modules["det"].groups}


def test_an_instance_measures_its_class_and_the_next_epoch_plans_from_it(env, capsys) -> None:
    ctl, clients, cfg, clock, model_path = env
    assert WORKER_PROFILES_PREFIX == PROFILES_PREFIX  # the store instances write is the one planned from
    # GIVEN the first plan, from the derived entries planned 1.5x longer
    first = ctl.run_epoch()
    assert first.status == "published" and not first.measured_on_instance
    dep = ctl.plans.deployment(first.version, "cams")
    assert dep is not None
    ((hw, batch), planned), *_ = _durations(dep.plan).items()
    assert hw == "c6i.large" and planned >= (0.04 + 0.01 * batch) * (1 + DERIVED_MARGIN) - 1e-9
    manifest = ctl.plans.current()
    assert manifest.apps["cams"].model_extra["profile_sources"] == {"det": {"c6i.large": "derived"}}

    # WHEN an instance of the class runs its hook before claiming (real profiler, this CPU)
    lines: list[str] = []
    hook = BeforeClaim(
        hardware="c6i.large",
        instance_id="i-1",
        fleet=ctl.plans.fleet,
        deployment=ctl.plans.deployment,
        resolve=lambda _dep, _share: ("onnx", "tiny", model_path, 1),
        runtimes=RuntimeCache(make=lambda a: EmulatedRuntime(0.0, a.hardware)),
        instance=instance_info("c6i.large", False, device_name(False), "-"),
        store=profile_store(clients["s3"], cfg.bucket),
        runs=3,
        log=lines.append,
    )
    hook(first.version)
    assert any("1 of 1 models have only derived entries on c6i.large" in line for line in lines)
    assert hook.reports and hook.reports[0].measured["tiny"] >= 1
    stored = json.loads(
        clients["s3"].get_object(Bucket=cfg.bucket, Key=f"{PROFILES_PREFIX}/data/tiny.json")["Body"].read()
    )
    assert stored and all(e["note"] == ONSITE_NOTE and e["instance_type"] == "c6i.large" for e in stored)
    assert batch in {e["batch"] for e in stored}  # the planned batch was measured
    measured = {e["batch"]: float(e.get("p95_s") or e["duration_s"]) for e in stored}

    # THEN the next epoch (at the same observed rate) plans from the measured entries (no margin)
    _frames(clients["cloudwatch"], cfg, clock[0], 4.0)
    clock[0] += 60
    second = ctl.run_epoch()
    assert second.measured_on_instance == {"cams": {"tiny": ["c6i.large"]}}
    assert second.status == "published"
    dep2 = ctl.plans.deployment(second.version, "cams")
    assert dep2 is not None
    assert _durations(dep2.plan)
    for (hw2, b2), duration in _durations(dep2.plan).items():
        assert hw2 == "c6i.large" and b2 in measured
        assert duration == pytest.approx(measured[b2], rel=1e-6)  # the measured p95, nothing added
        assert duration < planned  # the tiny model runs in well under the 50 ms derived for it
    assert ctl.plans.current().apps["cams"].model_extra["profile_sources"] == {
        "det": {"c6i.large": ONSITE_NOTE}
    }

    from skinflint.cli import main

    assert main(["status", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["apps"]["cams"]["profile_sources"] == {"det": {"c6i.large": ONSITE_NOTE}}
    assert doc["derived_margin"] == DERIVED_MARGIN
    assert main(["status"]) == 0
    assert "measured on instance" in capsys.readouterr().out
    assert main(["apps", "show", "cams", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["profile_sources"] == {"det": {"c6i.large": ONSITE_NOTE}}
    assert main(["apps", "show", "cams"]) == 0
    assert "profiled on c6i.large (measured on instance)" in capsys.readouterr().out
