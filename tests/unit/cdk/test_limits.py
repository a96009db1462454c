"""cdk/limits.py: the -c values a peak needs and the vCPU quotas they draw on (pure arithmetic)."""

from __future__ import annotations

import pytest

from cdk import constants as C
from cdk.limits import LIMIT_HEADROOM, deployment_context, max_instances, quota_for, vcpu_needs

CATALOG = {
    "t4": {"instance_type": "g4dn.xlarge", "vcpus": 4},
    "v100": {"instance_type": "p3.2xlarge", "vcpus": 8},
    "c6i.large": {"instance_type": "c6i.large", "vcpus": 2},
    "p100": {"vcpus": 8},  # no EC2 instance type: never counted
}


@pytest.mark.parametrize(
    ("planned", "want"),
    [
        (0, C.ASG_MAX_INSTANCES),  # the default is the floor
        (6, C.ASG_MAX_INSTANCES),  # ceil(6 x 1.5) = 9 < 10
        (7, 11),  # ceil(7 x 1.5) = ceil(10.5) = 11
        (55, 83),  # ceil(82.5)
        (98, 147),  # 98 x 1.5 = 147
    ],
)
def test_max_instances(planned: int, want: int) -> None:
    assert LIMIT_HEADROOM == 1.5
    assert max_instances(planned) == want


def test_context_at_50000_frames_per_second() -> None:
    ctx = deployment_context(50_000, {"t4": 55, "c6i.large": 98, "v100": 0})
    assert ctx["max_instances"] == "c6i.large:147,t4:83"  # unused classes keep the default
    assert ctx["api_rate"] == "75000"  # 50,000 x 1.5
    assert ctx["api_burst"] == "75000"  # a second of the peak
    assert ctx["api_quota"] == str(2**31 - 1)  # 75,000 x 86,400 = 6.48e9, capped at the 32-bit limit
    assert ctx["waf_rate"] == "22500000"  # 75,000 x 300 s
    assert ctx["front_concurrency"] == "7500"  # 75,000 x 0.1 s
    assert ctx["planner_concurrency"] == str(C.PLANNER_RESERVED_CONCURRENCY)


def test_context_never_lowers_a_default() -> None:
    ctx = deployment_context(2, {"c6i.large": 1})
    assert ctx["max_instances"] == f"c6i.large:{C.ASG_MAX_INSTANCES}"
    assert int(ctx["api_burst"]) == C.API_BURST and int(ctx["api_quota"]) == C.API_QUOTA_PER_DAY
    assert int(ctx["waf_rate"]) == C.WAF_RATE_LIMIT_PER_5MIN
    assert ctx["front_concurrency"] == "1"  # ceil(3 x 0.1)


def test_vcpus_per_quota() -> None:
    # G: 83 x 4 = 332; Standard: 147 x 2 = 294; P: max(10, 2) = 10 x 8 = 80
    need = vcpu_needs({"t4": 55, "c6i.large": 98, "v100": 1, "p100": 3}, CATALOG)
    assert need == {"L-DB2E81BA": 332, "L-1216C47A": 294, "L-417A185B": 80}
    spot = vcpu_needs({"t4": 1}, CATALOG, spot=True)
    assert spot == {"L-3819A6DF": 40}  # the Spot G quota, 10 x 4


@pytest.mark.parametrize(
    ("itype", "code"),
    [("g4dn.xlarge", "L-DB2E81BA"), ("p3.2xlarge", "L-417A185B"), ("c6i.large", "L-1216C47A")],
)
def test_quota_for(itype: str, code: str) -> None:
    assert quota_for(itype).code == code
