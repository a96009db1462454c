"""The cost report: CloudWatch metrics and the config table's plans -> per-app planned, billed and
observed cost, cost per 1,000 frames, SLO attainment, with plots and an HTML page
(``skinflint report``; docs/report.md)."""

from skinflint.report.cloudwatch import CloudWatchReader, ReportError, Series, SeriesRequest
from skinflint.report.collect import METRIC_STATS, collect_report
from skinflint.report.model import ReportInput, compute_report, latency_cdf, quantile_from_cdf
from skinflint.report.plans import PlanHistory, PlannedVersion, load_plan_history

__all__ = [
    "METRIC_STATS",
    "CloudWatchReader",
    "PlanHistory",
    "PlannedVersion",
    "ReportError",
    "ReportInput",
    "Series",
    "SeriesRequest",
    "collect_report",
    "compute_report",
    "latency_cdf",
    "load_plan_history",
    "quantile_from_cdf",
]
