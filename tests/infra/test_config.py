"""Context validation: runs before any construct exists, so these tests need no synthesis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from cdk.config import DeployConfig, InfraConfigError, validate_instance_type
from cdk.constants import REPO_ROOT

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.infra

BASE = {"account": "123456789012", "region": "us-east-1", "models": "none"}


def config(**ctx: str) -> DeployConfig:
    return DeployConfig.from_context({**BASE, **ctx}.get)


def test_default_hardware_is_every_class_with_an_instance_type() -> None:
    names = [h.name for h in config().hardware]
    assert "p100" not in names
    assert {"t4", "v100"} <= set(names)


def test_p100_without_instance_type_fails_with_one_line() -> None:
    with pytest.raises(InfraConfigError) as err:
        config(hardware="t4,p100")
    msg = str(err.value)
    assert "\n" not in msg
    assert "p100 has no EC2 instance type" in msg
    assert "-c p100_instance_type=" in msg


@pytest.mark.parametrize(
    "ctx",
    [{"p100_instance_type": "g4dn.2xlarge"}, {"instance_types": "p100:g4dn.2xlarge"}],
)
def test_p100_with_instance_type_deploys(ctx: dict[str, str]) -> None:
    (p100,) = config(hardware="p100", **ctx).hardware
    assert (p100.instance_type, p100.kind, p100.asg_name) == ("g4dn.2xlarge", "gpu", "skinflint-workers-p100")


def test_cpu_stands_for_every_cpu_class() -> None:
    hw = config(hardware="t4,cpu").hardware
    assert hw[0].name == "t4"
    assert {h.kind for h in hw[1:]} == {"cpu"} and len(hw) > 1


@pytest.mark.parametrize(
    ("kind", "itype", "why"),
    [
        ("gpu", "n1-custom-8-30720", "not an EC2 instance type"),  # a GCP machine type
        ("gpu", "c6i.large", "has no NVIDIA GPU"),
        ("gpu", "g4ad.xlarge", "has no NVIDIA GPU"),  # AMD
        ("gpu", "g5g.xlarge", "arm64"),  # Graviton + T4G: the AMIs are x86_64
        ("cpu", "g4dn.xlarge", "is a GPU type"),
        ("cpu", "c7g.large", "arm64"),
    ],
)
def test_instance_types_are_validated(kind: str, itype: str, why: str) -> None:
    with pytest.raises(InfraConfigError, match=why):
        validate_instance_type("x", kind, itype)


@pytest.mark.parametrize("itype", ["p3.2xlarge", "g4dn.xlarge", "g6e.12xlarge", "p4d.24xlarge"])
def test_gpu_instance_types_accepted(itype: str) -> None:
    assert validate_instance_type("x", "gpu", itype) == itype


@pytest.mark.parametrize(
    ("ctx", "why"),
    [
        ({"hardware": "a100"}, "unknown hardware 'a100'"),
        ({"instance_types": "a100:p4d.24xlarge"}, "unknown hardware a100"),
        ({"instance_types": "p100"}, "class:type"),
        ({"spot": "maybe"}, "spot must be true or false"),
        ({"front_concurrency": "0"}, "positive integer"),
        ({"planner_concurrency": "-4"}, "positive integer"),
        ({"max_instances": "t4"}, "class:count"),
        ({"max_instances": "t4:0"}, "positive integer"),
        ({"max_instances": "p100:5", "hardware": "t4"}, "p100, which is not deployed"),
        ({"waf_rate": "5"}, r"within \[10, 2,000,000,000\]"),
        ({"api_rate": "fast"}, "api_rate must be a positive integer"),
        ({"front_api": "websocket"}, "front_api must be one of http, rest"),
        ({"account": "12345"}, "12-digit"),
        ({"t4_instance_type": "c6i.large", "hardware": "t4"}, "GPU class"),
    ],
)
def test_bad_context_fails(ctx: dict[str, str], why: str) -> None:
    with pytest.raises(InfraConfigError, match=why):
        config(**ctx)


def test_front_api_defaults_to_the_http_api() -> None:
    assert config().front_api == "http"
    assert config(front_api="rest").front_api == "rest"
    assert config(front_api=" REST ").front_api == "rest"
    assert config(front_api="").front_api == "http"


def test_spot_flag() -> None:
    assert config(spot="true").spot is True
    assert config(spot="false").spot is False
    assert config().spot is False


def test_app_py_exits_2_with_one_line_for_p100() -> None:
    """``cdk synth -c hardware=p100`` passes context in CDK_CONTEXT_JSON; the app must refuse it."""
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps({"hardware": "p100"})}
    out = subprocess.run(
        [sys.executable, "app.py"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("skinflint cdk: hardware p100 has no EC2 instance type")


def test_limits_default_to_a_new_account_and_follow_the_context() -> None:
    from cdk import constants as C

    default = config(hardware="t4,c6i.large")
    # nothing reserved: a new account's 10 concurrent executions leave none to reserve
    assert default.front_concurrency is None and default.planner_concurrency is None
    assert default.max_instances == {} and default.api_rate == C.API_RATE_LIMIT_RPS
    sized = config(
        hardware="t4,c6i.large",
        max_instances="t4:83, c6i.large:147",
        api_rate="75000",
        api_burst="75000",
        api_quota="2147483647",
        waf_rate="22500000",
        front_concurrency="7500",
        planner_concurrency="none",
    )
    assert sized.max_instances == {"t4": 83, "c6i.large": 147}
    assert (sized.api_rate, sized.api_burst, sized.api_quota) == (75_000, 75_000, 2**31 - 1)
    assert (sized.waf_rate, sized.front_concurrency, sized.planner_concurrency) == (22_500_000, 7500, None)


def test_synthesis_says_what_ships_and_the_limits(tmp_path: Path) -> None:
    from cdk.app import _limits_line, _wheels_line
    from tests.infra.test_limits import fake_wheelhouse

    cfg = config(hardware="t4,c6i.large", worker_wheels=str(tmp_path / "none"), max_instances="t4:83")
    assert _wheels_line(cfg) == (
        "wheelhouses: cpu NOT BUILT (boots fail), gpu NOT BUILT (boots fail) (python -m cdk.deps worker)"
    )
    built = config(hardware="t4", worker_wheels=str(fake_wheelhouse(tmp_path / "wheels")))
    assert _wheels_line(built).startswith("wheelhouses: gpu 5 wheels")  # the 5 stand-in wheels
    line = _limits_line(cfg)
    assert "max instances t4 83, c6i.large 10" in line and "front unreserved, planner unreserved" in line
    assert "HTTP API 500 req/s (burst 1000; no WAF)" in line and "/day" not in line
    rest = _limits_line(config(hardware="t4", front_api="rest", waf_rate="45000"))
    assert "REST API 500 req/s (burst 1000, 5,000,000/day); WAF 45,000 per IP per 5 min" in rest
