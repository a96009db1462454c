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

__all__ = [
    "LIMIT_HEADROOM",
    "QUOTAS",
    "Quota",
    "deployment_context",
    "quota_for",
    "table_units",
    "vcpu_needs",
]

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


# -- DynamoDB throughput at the peak ------------------------------------------------------------------
# DynamoDB's documented quotas ("Service, account, and table quotas in Amazon DynamoDB"): an on-demand
# table starts at 40,000 read and 40,000 write request units per second (table-level throughput,
# adjustable in Service Quotas), and one partition serves at most 3,000 read and 1,000 write units/s.
DDB_TABLE_READ_UNITS = 40_000
DDB_TABLE_WRITE_UNITS = 40_000
DDB_PARTITION_READ_UNITS = 3_000
DDB_PARTITION_WRITE_UNITS = 1_000
# What the code reads and writes per process and second, not per frame (the same figures as the
# code's constants; tests/unit/cdk/test_table_units.py checks them):
FRONT_POINTER_CHECK_S = 1.0  # front/service.py _POINTER_TTL_S: one hint read (1 read unit) per check
FRONT_KEY_TTL_S = 10.0  # front/service.py _KEY_TTL_S: one API-key read per instance and key
AGENT_POLL_S = 1.0  # workers/agent.py poll_s: each instance reads the pointer (<= 4 KB: 1 read unit)
AGENT_REPORT_S = 5.0  # workers/agent.py report_s: each instance writes its heartbeat (1 write unit)
POINTER_HINTS = 16  # core/adapters/plan_store.py HINTS: the front's checks spread over these keys


def table_units(
    frame_rate: float,
    units_per_frame: Mapping[str, float],
    instances: Mapping[str, int],
    front_instances: int,
    roots: int,
) -> dict[str, Any]:
    """Read and write units per second each table needs at ``frame_rate`` frames/s (on-demand request
    units): the results table's from the data plane's units per frame (``units_per_frame``: the
    ``data_plane_units_per_frame`` of ``skinflint plan``, profiles/allin.py, which counts the code's
    requests per frame and per task), the config table's from the processes that poll it
    (``front_instances`` front executions, ``instances`` EC2 instances), and the busiest key of each
    kind against a partition's limits."""
    machines = sum(instances.values())
    results = {
        "read": round(frame_rate * units_per_frame["dynamodb_read_units"]),
        "write": round(frame_rate * units_per_frame["dynamodb_write_units"]),
    }
    config = {
        "read": round(front_instances / FRONT_POINTER_CHECK_S + front_instances / FRONT_KEY_TTL_S)
        + round(machines / AGENT_POLL_S),
        "write": round(machines / AGENT_REPORT_S),
    }
    hottest = {
        # each front execution checks one hint a second; the hints share the checks
        "plan#current#h<i> reads": math.ceil(front_instances / FRONT_POINTER_CHECK_S / POINTER_HINTS),
        # the instance agents read the pointer itself
        "plan#current reads": math.ceil(machines / AGENT_POLL_S),
    }
    over = [
        f"{table} {kind}"
        for table, units in (("results", results), ("config", config))
        for kind, limit in (("read", DDB_TABLE_READ_UNITS), ("write", DDB_TABLE_WRITE_UNITS))
        if units[kind] > limit
    ]
    return {
        "frame_rate": frame_rate,
        "results": results,
        "config": config,
        "per_frame": {
            "results_read": units_per_frame["dynamodb_read_units"],
            "results_write": units_per_frame["dynamodb_write_units"],
            "slot_count_writes": float(roots),
        },
        "front_instances": front_instances,
        "instances": machines,
        "hottest_key_units_per_s": hottest,
        "partition_limits": {"read": DDB_PARTITION_READ_UNITS, "write": DDB_PARTITION_WRITE_UNITS},
        "table_defaults": {"read": DDB_TABLE_READ_UNITS, "write": DDB_TABLE_WRITE_UNITS},
        "over_table_defaults": over,
        "sources": (
            "results: frame rate x data_plane_units_per_frame (profiles/allin.py, the code's requests "
            "per frame and task, from the code's writes); config: front executions "
            "(cdk_context front_concurrency) and instances x the code's polling periods (cdk/limits.py); "
            "limits: DynamoDB's service quotas page"
        ),
        "not_counted": (
            "clients' result reads (GET /v1/requests/{id}: the POST item and one Query of its records), and "
            "slot-count writes refused because another front filled the window (one per front and full "
            "window tried)"
        ),
    }
