"""Reading metrics back from CloudWatch (moto's locally): ``ListMetrics`` to find the series of a
metric, ``GetMetricData`` (500 queries a call, paginated) for their per-period statistics. Both
exist in moto and in CloudWatch; percentile statistics do not exist in moto, which is why latency
distributions are published as histogram counts (``core/adapters/outcomes.py``)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.adapters._aws import AWS_ERRORS
from skinflint.errors import SkinflintError

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["CloudWatchReader", "ReportError", "Series", "SeriesRequest"]

_MAX_QUERIES = 500  # GetMetricData's limit per call


class ReportError(SkinflintError):
    """CloudWatch or the config table could not be read for the report."""


@dataclass(frozen=True)
class SeriesRequest:
    name: str
    dims: tuple[tuple[str, str], ...]  # (name, value) pairs, in the order ListMetrics gave them
    stat: str  # Sum, SampleCount, Average, Maximum, Minimum


@dataclass
class Series:
    """One metric series' statistic per period (period start, epoch s -> value)."""

    name: str
    dims: dict[str, str]
    stat: str
    points: dict[float, float] = field(default_factory=dict)

    def total(self) -> float:
        return float(sum(self.points.values()))

    def peak(self) -> float | None:
        return max(self.points.values()) if self.points else None


class CloudWatchReader:
    def __init__(self, client: Any, namespace: str):
        self._cw = client
        self.namespace = namespace

    def list_series(self, metric: str) -> list[dict[str, str]]:
        """The dimension sets under which ``metric`` was published."""
        out: list[dict[str, str]] = []
        kwargs: dict[str, Any] = {"Namespace": self.namespace, "MetricName": metric}
        try:
            while True:
                page = self._cw.list_metrics(**kwargs)
                for metric_doc in page.get("Metrics", []):
                    dims = {dim["Name"]: dim["Value"] for dim in metric_doc.get("Dimensions", [])}
                    if dims not in out:
                        out.append(dims)
                token = page.get("NextToken")
                if not token:
                    return out
                kwargs["NextToken"] = token
        except AWS_ERRORS as exc:
            raise ReportError(f"cannot list the {metric} metrics: {exc}") from exc

    def fetch(
        self, requests: Iterable[SeriesRequest], start: float, end: float, period_s: int
    ) -> list[Series]:
        """Every requested statistic per ``period_s`` over ``[start, end)`` (epoch s)."""
        reqs = list(dict.fromkeys(requests))
        out: list[Series] = []
        for i in range(0, len(reqs), _MAX_QUERIES):
            chunk = reqs[i : i + _MAX_QUERIES]
            queries = [
                {
                    "Id": f"q{index}",
                    "MetricStat": {
                        "Metric": {
                            "Namespace": self.namespace,
                            "MetricName": request.name,
                            "Dimensions": [{"Name": name, "Value": value} for name, value in request.dims],
                        },
                        "Period": period_s,
                        "Stat": request.stat,
                    },
                    "ReturnData": True,
                }
                for index, request in enumerate(chunk)
            ]
            points = self._get(queries, start, end)
            out.extend(
                Series(request.name, dict(request.dims), request.stat, points.get(f"q{index}", {}))
                for index, request in enumerate(chunk)
            )
        return out

    def _get(self, queries: list[dict[str, Any]], start: float, end: float) -> dict[str, dict[float, float]]:
        kwargs: dict[str, Any] = {
            "MetricDataQueries": queries,
            "StartTime": dt.datetime.fromtimestamp(start, dt.UTC),
            "EndTime": dt.datetime.fromtimestamp(end, dt.UTC),
            "ScanBy": "TimestampAscending",
        }
        got: dict[str, dict[float, float]] = {}
        try:
            while True:
                page = self._cw.get_metric_data(**kwargs)
                for res in page.get("MetricDataResults", []):
                    pts = got.setdefault(res["Id"], {})
                    for ts, value in zip(res.get("Timestamps", []), res.get("Values", []), strict=False):
                        if value is not None:
                            pts[ts.timestamp()] = pts.get(ts.timestamp(), 0.0) + float(value)
                token = page.get("NextToken")
                if not token:
                    return got
                kwargs["NextToken"] = token
        except AWS_ERRORS as exc:
            raise ReportError(f"GetMetricData failed: {exc}") from exc
