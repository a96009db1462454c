"""Observed frame rates from CloudWatch: the front's ``FramesAccepted`` metric (dimension ``App``)
plus the frames it shed for lack of capacity, summed over whole periods and divided by the time
they cover."""

from __future__ import annotations

import datetime as dt
import math
from typing import TYPE_CHECKING, Any

from core.adapters._aws import AWS_ERRORS
from core.errors import MetricsError
from core.hops import BOUNDS_MS, BUCKET_METRIC

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = ["DEFAULT_SHED_CAP", "SHED_REASONS", "HopDelays", "ObservedRates", "RateWindow", "ServiceOverruns"]

_MAX_QUERIES = 500  # GetMetricData's limit per call
#: FrontRejected reasons that mean "no planned capacity for this frame" (front/admission.py)
SHED_REASONS = ("over_planned_rate", "slot_full", "queue_backlog", "deadline")


class RateWindow:
    """``[start, end)``: the last ``ceil(window_s / period_s)`` whole periods (at least one) that
    ended by ``now - lag_s``. CloudWatch sums per period, so a partial period would be under-counted;
    writers stamp values with the time they happened (``core.adapters.metrics``) and flush them
    later, so a period is complete only once every writer has flushed after its end: ``lag_s`` is
    the writers' flush interval (plus delivery)."""

    def __init__(self, now: float, window_s: float, period_s: int, lag_s: float = 0.0):
        if period_s < 1 or lag_s < 0 or window_s < 0:
            raise ValueError(f"bad rate window: window {window_s} s, period {period_s} s, lag {lag_s} s")
        self.period_s = int(period_s)
        self.lag_s = float(lag_s)
        self.end = math.floor((now - lag_s) / period_s) * period_s
        self.start = self.end - period_s * max(1, math.ceil(window_s / period_s - 1e-9))

    @property
    def seconds(self) -> float:
        return float(self.end - self.start)


def _metric_values(
    cw: Any,
    namespace: str,
    series: list[tuple[str, list[dict[str, str]]]],
    stat: str,
    window: RateWindow,
) -> Iterator[tuple[int, list[float]]]:
    """(index into ``series``, values) for each (metric name, dimensions) of ``series`` over
    ``window`` at its period: GetMetricData in chunks of 500 queries, every page followed."""
    for index, _, values in _metric_points(cw, namespace, series, stat, window):
        yield index, values


def _metric_points(
    cw: Any,
    namespace: str,
    series: list[tuple[str, list[dict[str, str]]]],
    stat: str,
    window: RateWindow,
) -> Iterator[tuple[int, list[float], list[float]]]:
    """As :func:`_metric_values`, with each value's period start (epoch seconds)."""
    start = dt.datetime.fromtimestamp(window.start, dt.UTC)
    end = dt.datetime.fromtimestamp(window.end, dt.UTC)
    for i in range(0, len(series), _MAX_QUERIES):
        queries = [
            {
                "Id": f"m{i + index}",
                "MetricStat": {
                    "Metric": {"Namespace": namespace, "MetricName": metric, "Dimensions": dims},
                    "Period": window.period_s,
                    "Stat": stat,
                },
                "ReturnData": True,
            }
            for index, (metric, dims) in enumerate(series[i : i + _MAX_QUERIES])
        ]
        kwargs: dict[str, Any] = {"MetricDataQueries": queries, "StartTime": start, "EndTime": end}
        try:
            while True:
                page = cw.get_metric_data(**kwargs)
                for res in page.get("MetricDataResults", []):
                    stamps = [_epoch_s(stamp) for stamp in res.get("Timestamps", [])]
                    yield int(res["Id"][1:]), stamps, [float(value) for value in res.get("Values", [])]
                if not page.get("NextToken"):
                    break
                kwargs["NextToken"] = page["NextToken"]
        except AWS_ERRORS as exc:
            raise MetricsError(f"GetMetricData failed: {exc}") from exc


def _epoch_s(stamp: Any) -> float:
    return stamp.timestamp() if isinstance(stamp, dt.datetime) else float(stamp)


#: Shed frames count as demand up to this many times the frames accepted in the same window (the
#: default of ``ObservedRates.shed_cap``; ``SKINFLINT_SHED_DEMAND_CAP``): see :class:`ObservedRates`.
DEFAULT_SHED_CAP = 1.5


class ObservedRates:
    """Demand per app: frames accepted (``FramesAccepted``) plus frames the front shed for lack of
    planned capacity (``FrontRejected`` with one of ``shed_reasons``): a front that sheds at the
    planned rate would otherwise never show the planner that more is needed. A client that retries
    a shed frame is counted twice; the planner's headroom absorbs that.

    Refusals are not demand the plan must serve: a flood of requests the front refuses (one key
    sending 600 requests/s against a plan for 5 frames/s, issue #28) took the planned rate from 4.5 to
    445 frames/s within an epoch. So the shed frames counted are at most ``shed_cap`` times the
    frames accepted in the window: a real ramp is still seen (3 x the load with 25 accepted and 35
    shed reads 60 frames/s), but refusals can raise one epoch's observed rate to at most
    ``1 + shed_cap`` times what was admitted. ``shed_cap = 0`` plans from admitted frames alone
    (a ramp beyond the admission cap is then found only through the planner's headroom, about 10 %
    an epoch). Per-key refusals (``rate_limited``, 429) are never counted."""

    def __init__(
        self,
        client: Any,
        namespace: str,
        metric: str = "FramesAccepted",
        shed_metric: str = "FrontRejected",
        shed_reasons: tuple[str, ...] = SHED_REASONS,
        shed_cap: float | None = DEFAULT_SHED_CAP,
    ):
        if shed_cap is not None and not shed_cap >= 0:
            raise ValueError(f"shed_cap must be >= 0 or None, got {shed_cap!r}")
        self._cw = client
        self.namespace = namespace
        self.metric = metric
        self.shed_metric = shed_metric
        self.shed_reasons = shed_reasons
        self.shed_cap = shed_cap  # None: every shed frame counts (before issue #28)

    def _series(self, apps: list[str]) -> list[tuple[str, str, list[dict[str, str]]]]:
        out = [(app, self.metric, [{"Name": "App", "Value": app}]) for app in apps]
        out += [
            (app, self.shed_metric, [{"Name": "App", "Value": app}, {"Name": "Reason", "Value": reason}])
            for app in apps
            for reason in self.shed_reasons
        ]
        return out

    def frame_rates(self, apps: Iterable[str], window: RateWindow) -> dict[str, float]:
        """Frames/s demanded per app over ``window`` (0.0 for an app with no data)."""
        return {app: rate for app, (rate, _) in self.observe(apps, window).items()}

    def observe(self, apps: Iterable[str], window: RateWindow) -> dict[str, tuple[float, float | None]]:
        """Per app: (frames/s demanded over ``window``, the start of the first period with frames
        from the period before the window on, None when none). Read with one period of look-back:
        when the first period with frames is the window's first (or a later one) and the period
        before it had none, the app's first frames are in the window and its first period is
        likely partial (frames began somewhere inside it): the rate over the window under-counts."""
        names = sorted(set(apps))
        accepted = dict.fromkeys(names, 0.0)
        shed = dict.fromkeys(names, 0.0)
        first: dict[str, float | None] = dict.fromkeys(names)
        series = self._series(names)
        wider = RateWindow(window.end, window.seconds + window.period_s, window.period_s)
        for index, stamps, values in _metric_points(
            self._cw, self.namespace, [(metric, dims) for _, metric, dims in series], "Sum", wider
        ):
            app, metric, _ = series[index]
            into = accepted if metric == self.metric else shed
            into[app] += sum(
                value for stamp, value in zip(stamps, values, strict=True) if stamp >= window.start
            )
            seen = [stamp for stamp, value in zip(stamps, values, strict=True) if value > 0]
            if seen:
                cur = first[app]
                first[app] = min(seen) if cur is None else min(cur, *seen)
        return {app: (self.demand(accepted[app], shed[app]) / window.seconds, first[app]) for app in names}

    def demand(self, accepted: float, shed: float) -> float:
        """Frames demanded: the accepted ones and the shed ones up to ``shed_cap`` x accepted."""
        counted = shed if self.shed_cap is None else min(shed, self.shed_cap * accepted)
        return accepted + counted


class ServiceOverruns:
    """The workers' ``ServiceOverrunMs`` (per batch: window end to done, minus the planned batch
    duration; workers/worker.py), its ``Maximum`` per (app, module, hardware) over a window, in
    seconds. A key with no data is left out (not run in the window)."""

    def __init__(self, client: Any, namespace: str, metric: str = "ServiceOverrunMs"):
        self._cw = client
        self.namespace = namespace
        self.metric = metric

    def maxima(
        self, keys: Iterable[tuple[str, str, str]], window: RateWindow
    ) -> dict[tuple[str, str, str], float]:
        series = sorted(set(keys))
        out: dict[tuple[str, str, str], float] = {}
        # dimensions in name order, as the workers' metrics put them (moto matches dimensions as a
        # list; CloudWatch as a set)
        queries = [
            (
                self.metric,
                [
                    {"Name": "App", "Value": app},
                    {"Name": "Hardware", "Value": hw},
                    {"Name": "Module", "Value": module},
                ],
            )
            for app, module, hw in series
        ]
        for index, values in _metric_values(self._cw, self.namespace, queries, "Maximum", window):
            if values:
                out[series[index]] = max(out.get(series[index], -math.inf), max(values) / 1e3)
        return out


class HopDelays:
    """The workers' hop histogram (``HopDelayBucket``, core/hops.py): per (app, module), the count of
    first deliveries in each ``UpToMs`` bucket over a window (``Sum`` of every period). A key with no
    deliveries in the window is left out."""

    def __init__(self, client: Any, namespace: str, metric: str = BUCKET_METRIC):
        self._cw = client
        self.namespace = namespace
        self.metric = metric

    def counts(
        self, keys: Iterable[tuple[str, str]], window: RateWindow
    ) -> dict[tuple[str, str], dict[str, float]]:
        labels = [f"{bound:g}" for bound in BOUNDS_MS] + ["inf"]
        series = [(key, label) for key in sorted(set(keys)) for label in labels]
        # dimensions in name order, as the workers put them (moto matches dimensions as a list)
        queries = [
            (
                self.metric,
                [
                    {"Name": "App", "Value": app},
                    {"Name": "Module", "Value": module},
                    {"Name": "UpToMs", "Value": label},
                ],
            )
            for (app, module), label in series
        ]
        out: dict[tuple[str, str], dict[str, float]] = {}
        for index, values in _metric_values(self._cw, self.namespace, queries, "Sum", window):
            total = sum(values)
            if total > 0:
                key, label = series[index]
                bucket = out.setdefault(key, {})
                bucket[label] = bucket.get(label, 0.0) + total
        return out
