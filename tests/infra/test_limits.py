"""Limits that follow the plan: the ``cdk_context`` that ``skinflint plan traffic --rate 50000 --json``
prints sizes every limit of the synthesized app (Auto Scaling MaxSize, API throttle; the REST
variant's quota and WAF rate rule; reserved concurrency); the workers' wheelhouses ship one asset
per hardware kind; a failed boot is abandoned and alarmed."""

from __future__ import annotations

import contextlib
import io
import json
import re
from typing import TYPE_CHECKING, Any

import pytest
from aws_cdk.assertions import Match, Template

from cdk import constants as C
from cdk.deps import MANIFEST, REQUIREMENTS, requirements_for
from tests.infra.conftest import CONTEXT, Assembly, resources

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.infra

RATE = 50_000  # frames/s: the target peak


def _plan(rate: float) -> dict[str, Any]:
    from skinflint.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", "traffic", "--rate", str(rate), "--json"]) == 0
    doc: dict[str, Any] = json.loads(out.getvalue())
    return doc


def fake_wheelhouse(root: Path) -> Path:
    """A wheelhouse root as ``python -m cdk.deps worker`` leaves it (stand-in wheels, real manifest)."""
    for kind in C.WORKER_RUNTIME:
        d = root / kind
        d.mkdir(parents=True)
        reqs = requirements_for(kind)
        (d / REQUIREMENTS).write_text("\n".join(reqs) + "\n")
        wheels = [f"{req.split('>')[0].replace('-', '_')}-1.0-py3-none-any.whl" for req in reqs]
        for name in wheels:
            (d / name).write_bytes(b"wheel")
        manifest = {"kind": kind, "python": C.WORKER_PYTHON, "requirements": list(reqs), "wheels": wheels}
        (d / MANIFEST).write_text(json.dumps(manifest))
    return root


@pytest.fixture(scope="module")
def planned() -> dict[str, Any]:
    return _plan(RATE)


@pytest.fixture(scope="module")
def scaled(planned: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    """GIVEN the cdk_context of the traffic app's plan at 50,000 frames/s WHEN synthesized (cdk-nag
    on) with a built wheelhouse THEN every limit follows the plan (tests below)."""
    from cdk.app import build_app

    outdir = tmp_path_factory.mktemp("cdk.scaled")
    wheels = fake_wheelhouse(tmp_path_factory.mktemp("wheels"))
    ctx = {**CONTEXT, **planned["cdk_context"], "worker_wheels": str(wheels)}
    build_app(ctx, outdir=str(outdir), nag=True).synth()
    return Assembly(outdir=outdir, synth_s=0.0)


def test_every_planned_class_fits_its_group(planned: dict[str, Any], scaled: Assembly) -> None:
    groups = {
        g["Properties"]["AutoScalingGroupName"]: int(g["Properties"]["MaxSize"])
        for g in resources(scaled.template(C.FLEET_STACK), "AWS::AutoScaling::AutoScalingGroup").values()
    }
    used = {hw: n for hw, n in planned["instances"].items() if n}
    assert used, planned["instances"]
    for hw, count in used.items():
        name = C.ASG_NAME_PREFIX + hw.replace(".", "-")
        assert groups[name] >= count, (hw, groups[name], count)
    # the classes the plan does not use keep the default
    assert min(groups.values()) == C.ASG_MAX_INSTANCES


def test_api_waf_and_functions_follow_the_peak(planned: dict[str, Any], scaled: Assembly) -> None:
    ctx = planned["cdk_context"]
    front = Template.from_json(scaled.template(C.FRONT_STACK))
    rate, burst = int(ctx["api_rate"]), int(ctx["api_burst"])
    assert rate >= RATE and burst >= rate  # every frame is one request
    # the default HTTP API's stage (the REST variant's stage, usage plan and WAF rule follow the
    # same context: test_invariants.py, REST_CONTEXT)
    front.has_resource_properties(
        "AWS::ApiGatewayV2::Stage",
        {"DefaultRouteSettings": {"ThrottlingRateLimit": rate, "ThrottlingBurstLimit": burst}},
    )
    # what the REST variant's usage plan and WAF rule would get: a day of the peak per key, and
    # one client IP (a camera gateway) sending the whole peak for 5 minutes is not blocked
    assert int(ctx["api_quota"]) >= min(RATE * 86_400, 2**31 - 1)
    assert int(ctx["waf_rate"]) >= RATE * 300
    front.has_resource_properties(
        "AWS::Lambda::Function",
        {"Handler": C.FRONT_HANDLER, "ReservedConcurrentExecutions": int(ctx["front_concurrency"])},
    )
    control = Template.from_json(scaled.template(C.CONTROL_STACK))
    control.has_resource_properties(
        "AWS::Lambda::Function",
        {"Handler": C.PLANNER_HANDLER, "ReservedConcurrentExecutions": C.PLANNER_RESERVED_CONCURRENCY},
    )
    # the epoch, the backlog check and the fleet-event batches never throttle each other
    assert C.PLANNER_RESERVED_CONCURRENCY >= C.FLEET_EVENTS_CONCURRENCY + 2


def test_plan_text_prints_the_context(capsys: pytest.CaptureFixture[str]) -> None:
    from skinflint.cli import main

    assert main(["plan", "traffic", "--rate", "1000"]) == 0
    out = capsys.readouterr().out
    assert "-c max_instances=" in out and "-c api_rate=1500" in out
    assert "L-1216C47A" in out  # the EC2 quota the CPU classes count against


def test_each_kind_ships_its_own_wheelhouse(scaled: Assembly) -> None:
    from tests.infra.test_wiring import user_data_text

    fleet = scaled.template(C.FLEET_STACK)
    for hw, kind in (("t4", "gpu"), ("c6i.large", "cpu")):
        text = user_data_text(fleet, hw)
        assert f"requirements-{kind}.txt" in text
        assert "pip install --no-index --find-links /opt/skinflint/wheels" in text
        assert "wheelhouse shipped" not in text
        # EC2 takes at most 16 KB of user data; tokens (names, keys) resolve to < 100 bytes each
        assert len(text.encode()) + 100 * text.count("<token>") < 16 * 1024, len(text)
    warnings = " ".join(scaled.warnings(C.FLEET_STACK))
    assert "skinflint:worker-wheels" not in warnings


def test_boot_hook_abandons_and_failures_alarm(scaled: Assembly) -> None:
    fleet = Template.from_json(scaled.template(C.FLEET_STACK))
    fleet.has_resource_properties(
        "AWS::AutoScaling::LifecycleHook",
        {
            "LifecycleHookName": C.BOOT_HOOK_NAME,
            "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING",
            "DefaultResult": "ABANDON",
            "HeartbeatTimeout": C.BOOT_HEARTBEAT_S,
        },
    )
    fleet.has_resource_properties(
        "AWS::Logs::MetricFilter",
        {
            "FilterPattern": Match.string_like_regexp("SKINFLINT_BOOT_FAILED"),
            "MetricTransformations": [
                Match.object_like(
                    {"MetricName": C.BOOT_FAILURES_METRIC, "MetricNamespace": C.METRICS_NAMESPACE}
                )
            ],
        },
    )
    obs = Template.from_json(scaled.template(C.OBSERVABILITY_STACK))
    obs.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"MetricName": C.BOOT_FAILURES_METRIC, "Namespace": C.METRICS_NAMESPACE, "Threshold": 1},
    )


def test_without_a_wheelhouse_the_boot_fails_and_synth_warns(assembly: Assembly) -> None:
    """The session's assembly has no wheelhouse unless one was built here: then each kind's boot
    script fails the boot (ABANDON) instead of reaching for PyPI, and synthesis says so."""
    from tests.infra.test_wiring import user_data_text

    if (C.WORKER_WHEELS_DIR / "gpu" / MANIFEST).exists():
        pytest.skip("build/worker-wheels is built here")
    text = user_data_text(assembly.template(C.FLEET_STACK), "t4")
    assert 'boot_failed "no gpu wheelhouse shipped' in text
    assert "pip install -r" not in text
    assert any("skinflint:worker-wheels-gpu" in w for w in assembly.warnings(C.FLEET_STACK))


def test_gpu_ami_warns_for_volta(assembly: Assembly) -> None:
    assert any("skinflint:gpu-ami-v100" in w for w in assembly.warnings(C.FLEET_STACK))


def test_the_guide_quotes_this_plan(planned: dict[str, Any]) -> None:
    """docs/deploy.md's 50,000 frames/s figures are this plan's (instances, maxima, vCPUs, limits)."""
    from cdk.limits import QUOTAS

    doc = " ".join((C.REPO_ROOT / "docs" / "deploy.md").read_text().split())
    n = planned["instances"]
    maxima = dict(pair.split(":") for pair in planned["cdk_context"]["max_instances"].split(","))
    vcpus = planned["quota_vcpus"]
    assert f"needs {n['c6i.large']} c6i.large and {n['t4']} g4dn.xlarge" in doc
    assert f"MaxSize {maxima['c6i.large']} and {maxima['t4']}" in doc
    assert f"{vcpus['L-1216C47A']} Standard and {vcpus['L-DB2E81BA']} G vCPUs" in doc
    ctx = planned["cdk_context"]
    assert f"API rate of {int(ctx['api_rate']):,} requests/s" in doc
    assert f"{int(ctx['front_concurrency']):,} reserved front executions" in doc
    codes = {q.code for q in QUOTAS.values()}
    assert set(re.findall(r"L-[0-9A-F]{8}", doc)) <= codes
