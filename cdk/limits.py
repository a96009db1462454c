"""The deployment limits a peak frame rate needs, and the account quotas they draw on (pure: no
aws_cdk, no AWS calls). ``skinflint plan APP --rate R --json`` prints :func:`deployment_context` as
``cdk_context``: the ``-c key=value`` values with which ``python app.py`` sizes every limit
(cdk/config.py reads them); ``skinflint deploy check`` compares :func:`vcpu_needs` with the account's
Service Quotas.

Every factor here is a judgement, stated as one (no AWS account was available to measure them)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdk import constants as C

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["QUOTAS", "LIMIT_HEADROOM", "Quota", "deployment_context", "quota_for", "vcpu_needs"]

# x the planned peak: the limits must never be what sheds a planned frame. A judgement: bursts
# above the forecast's own headroom, and a plan change's new instances booting before the old drain.
LIMIT_HEADROOM = 1.5
# s of front-function time per request, for its concurrency (Little's law: rate x duration). An
# estimate, not a measurement: a warm request makes two parallel AWS round trips (frame items, root
# messages; docs/dataplane.md); replace it with the deployed front's p99 Duration once measured.
FRONT_REQUEST_S = 0.1
WAF_WINDOW_S = 300  # s: WAF's rate-based rules count requests per IP over 5 minutes
DAY_S = 86_400
# requests: a usage plan's quota limit is a 32-bit integer (API Gateway's QuotaSettings.limit)
API_QUOTA_MAX = 2_147_483_647


@dataclass(frozen=True)
class Quota:
    """A Service Quotas quota (``service``, ``code``) and AWS's default for a new account."""

    service: str
    code: str
    name: str
    default: float  # the quota a new account starts with (Service Quotas console, "AWS default")


# Service Quotas codes (aws service-quotas list-service-quotas --service-code ec2 / lambda); the
# defaults are AWS's documented new-account values (EC2 On-Demand instance limits page: 5 vCPUs for
# Standard, 0 for G/VT and P until requested; Lambda quotas page: 1,000 concurrent executions, which
# AWS may lower to 10 for new accounts).
_STANDARD = "Standard (A, C, D, H, I, M, R, T, Z)"
QUOTAS = {
    "standard": Quota("ec2", "L-1216C47A", f"Running On-Demand {_STANDARD} instances", 5),
    "g": Quota("ec2", "L-DB2E81BA", "Running On-Demand G and VT instances", 0),
    "p": Quota("ec2", "L-417A185B", "Running On-Demand P instances", 0),
    "standard-spot": Quota("ec2", "L-34B43A08", f"All {_STANDARD} Spot Instance Requests", 5),
    "g-spot": Quota("ec2", "L-3819A6DF", "All G and VT Spot Instance Requests", 0),
    "p-spot": Quota("ec2", "L-7212CCBC", "All P Spot Instance Requests", 0),
    "lambda": Quota("lambda", "L-B99A9384", "Concurrent executions", 10),
}  # fmt: skip


def quota_for(instance_type: str, spot: bool = False) -> Quota:
    """The vCPU quota an instance type counts against (by its family's first letter)."""
    family = instance_type.split(".", maxsplit=1)[0]
    key = "g" if family.startswith("g") else "p" if family.startswith("p") else "standard"
    return QUOTAS[f"{key}-spot" if spot else key]


def vcpu_needs(
    instances: Mapping[str, int], catalog: Mapping[str, Mapping[str, Any]], spot: bool = False
) -> dict[str, int]:
    """vCPUs each quota (code) must allow for ``instances`` (class -> count) at their Auto Scaling
    groups' MaxSize (:func:`max_instances`), since the groups may scale that far."""
    out: dict[str, int] = {}
    for name, count in instances.items():
        spec = catalog.get(name) or {}
        itype = spec.get("instance_type")
        if not count or not itype:
            continue
        code = quota_for(str(itype), spot).code
        out[code] = out.get(code, 0) + max_instances(count) * int(spec.get("vcpus") or 0)
    return out


def max_instances(planned: int) -> int:
    """An Auto Scaling group's MaxSize for ``planned`` instances at the peak (never below the
    default, ``C.ASG_MAX_INSTANCES``)."""
    return max(C.ASG_MAX_INSTANCES, math.ceil(planned * LIMIT_HEADROOM))


def deployment_context(frame_rate: float, instances: Mapping[str, int]) -> dict[str, str]:
    """The ``-c`` values for a deployment whose peak is ``frame_rate`` frames/s (one API request per
    frame) on ``instances`` (class -> planned count): every limit at LIMIT_HEADROOM x the peak."""
    peak = frame_rate * LIMIT_HEADROOM
    api_rate = math.ceil(peak)
    return {
        "max_instances": ",".join(
            f"{name}:{max_instances(count)}" for name, count in sorted(instances.items()) if count
        ),
        "api_rate": str(api_rate),
        "api_burst": str(max(C.API_BURST, api_rate)),  # a second of the peak at once
        "api_quota": str(min(API_QUOTA_MAX, max(C.API_QUOTA_PER_DAY, math.ceil(peak * DAY_S)))),
        "waf_rate": str(min(2_000_000_000, max(C.WAF_RATE_LIMIT_PER_5MIN, math.ceil(peak * WAF_WINDOW_S)))),
        "front_concurrency": str(math.ceil(peak * FRONT_REQUEST_S)),
        "planner_concurrency": str(C.PLANNER_RESERVED_CONCURRENCY),
    }
