"""Gather a report's inputs: which series exist (ListMetrics), their statistics (GetMetricData), the
plans (config table) and the prices (``profiles/hardware.json``; the data plane's AWS requests:
``profiles/aws_prices.json``), then compute it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skinflint.report.cloudwatch import CloudWatchReader, SeriesRequest
from skinflint.report.model import ReportInput, compute_report
from skinflint.report.plans import load_plan_history

if TYPE_CHECKING:
    from collections.abc import Mapping

    from profiles.aws_prices import AwsPrices

__all__ = ["METRIC_STATS", "collect_report"]

#: Statistics the report reads per metric.
METRIC_STATS: dict[str, tuple[str, ...]] = {
    "InstanceSeconds": ("Sum",),
    "DeviceMs": ("Sum", "SampleCount"),
    "PrepareMs": ("Sum",),
    "PrepareWaitMs": ("Maximum",),
    "BatchFill": ("Sum", "SampleCount"),
    "EmptySlots": ("Sum",),
    "Drops": ("Sum",),
    "Duplicates": ("Sum",),
    "PoisonMessages": ("Sum",),
    "ModuleLatencyMs": ("Maximum",),
    "FramesAccepted": ("Sum",),
    "FrontRejected": ("Sum",),
    "SloAttainment": ("Sum", "SampleCount"),
    "EndToEndLatencyMs": ("Sum", "SampleCount", "Maximum"),
    "EndToEndLatencyBucket": ("Sum",),
    "FramesDropped": ("Sum",),
    "AwsRequests": ("Sum",),  # Component, Service, Operation (core/adapters/usage.py)
    "AwsRequestUnits": ("Sum",),  # Component, Service, Unit
}
_DATA_PLANE = ("AwsRequests", "AwsRequestUnits")  # every app's: never filtered by app


def _wanted(metric: str, dims: Mapping[str, str], apps: list[str] | None) -> bool:
    if metric in _DATA_PLANE:
        return True
    if "App" not in dims:  # fleet-wide series (instances by hardware); front rejections without an app
        return metric == "InstanceSeconds" and "Hardware" in dims
    return apps is None or dims["App"] in apps


def collect_report(
    cw: Any,
    ddb: Any,
    *,
    namespace: str,
    config_table: str,
    prices: Mapping[str, float],
    start: float,
    end: float,
    period_s: int,
    apps: list[str] | None = None,
    aws_prices: AwsPrices | None = None,
    front_memory_mb: float | None = None,
) -> dict[str, Any]:
    """The report of ``apps`` (default: every app with metrics or a plan) over ``[start, end)``;
    the data plane's AWS requests priced with ``aws_prices`` (None: counted only), the front's
    Lambda milliseconds as GB-seconds at ``front_memory_mb``."""
    reader = CloudWatchReader(cw, namespace)
    requests: list[SeriesRequest] = []
    seen_apps: set[str] = set()
    for metric, stats in METRIC_STATS.items():
        for dims in reader.list_series(metric):
            if not _wanted(metric, dims, apps):
                continue
            if "App" in dims:
                seen_apps.add(dims["App"])
            # the order ListMetrics gave: moto matches dimension lists by a sort that depends on the
            # input order (Dimension.__lt__ compares a value with a name), CloudWatch by set
            key = tuple(dims.items())
            requests += [SeriesRequest(metric, key, stat) for stat in stats]
    plans = load_plan_history(ddb, config_table)
    names = apps or sorted(seen_apps | set(plans.deployments))
    series = reader.fetch(requests, start, end, period_s)
    return compute_report(
        ReportInput(
            start=start,
            end=end,
            period_s=period_s,
            apps=names,
            prices=prices,
            series=series,
            plans=plans,
            aws_prices=aws_prices,
            front_memory_mb=front_memory_mb,
        )
    )
