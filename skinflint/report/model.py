"""The cost report's figures from metric series and plans (pure: no AWS, no clock).

Billed cost is whole instances x price (``profiles/hardware.json``), from ``InstanceSeconds``:
- the fleet's instances (``workers/agent.py``: dimensions Hardware, State -- every state is
  billed) when they are published, else the workers' (App, Module, Hardware: one machine each);
- per period of ``period_s``: USD/h = sum over hardware of price x instance-seconds / period;
- *steady*: the mean over the interior periods (periods with data on both sides: a run's first
  and last periods are partial); *window*: all of it over the periods with data.
Planned cost is the plan in force at each period (the versions' manifests), so re-planning during
the window is followed. Occupancy is measured from the batches: their time on the device
(``DeviceMs``: the model run only, not the window, the input preparation or the I/O) over
(concurrency x machine-seconds), next to what the plan predicts for it (each group's
rate x device time per batch / (batch x concurrency), machine-weighted). An app's part of a shared
fleet's bill is split like the plan splits it (each instance's price over its shares by occupancy).

The data plane's AWS requests (``AwsRequests``, ``AwsRequestUnits``) are priced with the AWS price
table (skinflint/report/dataplane.py) and added to the fleet's billed cost in ``total``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from core.adapters.outcomes import LATENCY_BUCKETS_MS
from planner.models import planned_device_occupancy
from skinflint.report.dataplane import FRONT_DURATION, data_plane, grand_total

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from profiles.aws_prices import AwsPrices
    from skinflint.report.cloudwatch import Series
    from skinflint.report.plans import PlanHistory

__all__ = ["ReportInput", "compute_report", "latency_cdf", "quantile_from_cdf"]


@dataclass
class ReportInput:
    start: float
    end: float
    period_s: int
    apps: list[str]
    prices: Mapping[str, float]  # hardware -> USD/h
    series: list[Series]
    plans: PlanHistory
    aws_prices: AwsPrices | None = None  # the data plane's requests (None: counted, not priced)
    front_memory_mb: float | None = None  # MB of the front's Lambda: its milliseconds -> GB-seconds


def _of(series: Iterable[Series], name: str, stat: str, **dims: str) -> list[Series]:
    return [
        metric
        for metric in series
        if metric.name == name
        and metric.stat == stat
        and all(metric.dims.get(dim) == value for dim, value in dims.items())
    ]


def _sum(series: Iterable[Series]) -> float:
    return float(sum(metric.total() for metric in series))


def _by_period(series: Iterable[Series], weight: Mapping[str, float] | None = None) -> dict[float, float]:
    out: dict[float, float] = defaultdict(float)
    for metric in series:
        price = 1.0 if weight is None else weight.get(metric.dims.get("Hardware", ""), 0.0)
        for start, value in metric.points.items():
            out[start] += value * price
    return dict(out)


def _interior(periods: list[float], period_s: int) -> list[float]:
    have = set(periods)
    return [start for start in periods if (start - period_s) in have and (start + period_s) in have]


def latency_cdf(buckets: Mapping[str, float]) -> list[tuple[float, float]]:
    """(upper edge ms, fraction of frames at or below it) from the histogram's counts per ``LeMs``."""
    total = sum(buckets.values())
    if total <= 0:
        return []
    out: list[tuple[float, float]] = []
    acc = 0.0
    for edge in (*LATENCY_BUCKETS_MS, math.inf):
        acc += buckets.get(f"{edge:g}" if math.isfinite(edge) else "inf", 0.0)
        out.append((edge, acc / total))
    return out


def quantile_from_cdf(cdf: list[tuple[float, float]], fraction: float) -> float | None:
    """The smallest bucket edge with at least ``fraction`` of the frames at or below it (an upper bound)."""
    for edge, frac in cdf:
        if frac >= fraction - 1e-12:
            return edge
    return None


class _FleetPeriod(TypedDict):
    """One period of the fleet's timeline (USD/h)."""

    t: float
    observed_per_hour: float
    planned_per_hour: float | None  # None: no plan in force at the period
    by_hardware: dict[str, float]


def _fleet(inp: ReportInput, inst: list[Series]) -> dict[str, Any]:
    period_s = inp.period_s
    rate = _by_period(inst, inp.prices)  # USD x s / h per period -> /period_s = USD/h
    per_hw: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for metric in inst:
        for start, value in metric.points.items():
            per_hw[metric.dims.get("Hardware", "?")][start] += value
    periods = sorted(rate)
    interior = _interior(periods, period_s)

    def planned(start: float) -> float | None:
        version = inp.plans.at(start + period_s / 2)
        return version.billed_per_hour if version is not None else None

    timeline: list[_FleetPeriod] = [
        {
            "t": start,
            "observed_per_hour": rate[start] / period_s,
            "planned_per_hour": planned(start),
            "by_hardware": {
                hw: pts.get(start, 0.0) * inp.prices.get(hw, 0.0) / period_s
                for hw, pts in sorted(per_hw.items())
            },
        }
        for start in periods
    ]
    observed_usd = sum(rate.values()) / 3600.0
    span_h = len(periods) * period_s / 3600.0
    steady = [row for row in timeline if row["t"] in set(interior)]
    obs_steady = sum(row["observed_per_hour"] for row in steady) / len(steady) if steady else None
    plan_pts = [row["planned_per_hour"] for row in steady if row["planned_per_hour"] is not None]
    plan_steady = sum(plan_pts) / len(plan_pts) if plan_pts and len(plan_pts) == len(steady) else None
    all_plan = [row["planned_per_hour"] for row in timeline if row["planned_per_hour"] is not None]
    planned_usd = sum(all_plan) * period_s / 3600.0 if all_plan and len(all_plan) == len(timeline) else None
    return {
        "instance_seconds": {hw: sum(pts.values()) for hw, pts in sorted(per_hw.items())},
        "observed_usd": observed_usd,
        "planned_usd": planned_usd,
        "observed_per_hour_window": observed_usd / span_h if span_h > 0 else None,
        "planned_per_hour_window": planned_usd / span_h if planned_usd is not None and span_h > 0 else None,
        "observed_per_hour_steady": obs_steady,
        "planned_per_hour_steady": plan_steady,
        "deviation_steady": (obs_steady / plan_steady - 1.0)
        if obs_steady is not None and plan_steady
        else None,
        "deviation_window": (observed_usd / planned_usd - 1.0) if planned_usd else None,
        "active_periods": len(periods),
        "interior_periods": len(interior),
        "timeline": timeline,
    }


def _peaks(inp: ReportInput, name: str, dims: Mapping[str, str]) -> list[float]:
    peaks = (metric.peak() for metric in _of(inp.series, name, "Maximum", **dims))
    return [peak for peak in peaks if peak is not None]


def _modules(inp: ReportInput, app: str) -> dict[str, dict[str, Any]]:
    dep = inp.plans.deployments.get(app)
    keys = sorted(
        {
            (metric.dims["Module"], metric.dims["Hardware"])
            for metric in inp.series
            if metric.dims.get("App") == app and "Module" in metric.dims and "Hardware" in metric.dims
        }
    )
    out: dict[str, dict[str, Any]] = {}
    for module, hw in keys:
        dims = {"App": app, "Module": module, "Hardware": hw}
        conc = 1
        planned_worst = planned_occupancy = None
        if dep is not None and module in dep.plan.modules:
            mp = dep.plan.modules[module]
            conc = max((group.concurrency for group in mp.groups if group.hardware == hw), default=1)
            planned_worst = mp.worst_case_latency_s
            planned_occupancy = planned_device_occupancy(mp, hw)
        machine_s = _sum(_of(inp.series, "InstanceSeconds", "Sum", **dims))
        busy_s = _sum(_of(inp.series, "DeviceMs", "Sum", **dims)) / 1e3
        batches = _sum(_of(inp.series, "DeviceMs", "SampleCount", **dims))
        fill_n = _sum(_of(inp.series, "BatchFill", "SampleCount", **dims))
        empty = _sum(_of(inp.series, "EmptySlots", "Sum", **dims))
        worst = [
            peak
            for metric in _of(inp.series, "ModuleLatencyMs", "Maximum", **dims)
            if (peak := metric.peak()) is not None
        ]
        out[f"{module} @ {hw}"] = {
            "module": module,
            "hardware": hw,
            "machine_seconds": machine_s,
            "busy_seconds": busy_s,
            "occupancy": busy_s / (conc * machine_s) if machine_s > 0 else None,
            "planned_occupancy": planned_occupancy,
            # the worker's own per-batch CPU work (decode, crop, resize) and what of it a batch still
            # waited for when its window closed (the rest ran while the window was open)
            "prepare_ms_mean": (_sum(_of(inp.series, "PrepareMs", "Sum", **dims)) / batches)
            if batches
            else None,
            "prepare_wait_ms_max": max(waits) if (waits := _peaks(inp, "PrepareWaitMs", dims)) else None,
            "batches": batches,
            "batch_fill": _sum(_of(inp.series, "BatchFill", "Sum", **dims)) / fill_n if fill_n else None,
            "empty_slots": empty,
            "empty_slot_fraction": empty / (empty + batches) if empty + batches > 0 else None,
            "drops": _sum(_of(inp.series, "Drops", "Sum", **dims)),
            "duplicates": _sum(_of(inp.series, "Duplicates", "Sum", **dims)),
            "poison": _sum(_of(inp.series, "PoisonMessages", "Sum", **dims)),
            "latency_max_s": max(worst) / 1e3 if worst else None,
            "planned_worst_s": planned_worst,
        }
    return out


def _app(inp: ReportInput, app: str, fleet: dict[str, Any], fleet_source: str) -> dict[str, Any]:
    dep = inp.plans.deployments.get(app)
    latest = inp.plans.versions[-1] if inp.plans.versions else None
    frames = _sum(_of(inp.series, "FramesAccepted", "Sum", App=app))
    rejected: dict[str, float] = defaultdict(float)
    for metric in _of(inp.series, "FrontRejected", "Sum", App=app):
        rejected[metric.dims.get("Reason", "?")] += metric.total()
    completed = _sum(_of(inp.series, "SloAttainment", "SampleCount", App=app))
    within = _sum(_of(inp.series, "SloAttainment", "Sum", App=app))
    lat_n = _sum(_of(inp.series, "EndToEndLatencyMs", "SampleCount", App=app))
    lat_max = [
        peak
        for metric in _of(inp.series, "EndToEndLatencyMs", "Maximum", App=app)
        if (peak := metric.peak()) is not None
    ]
    buckets: dict[str, float] = defaultdict(float)
    for metric in _of(inp.series, "EndToEndLatencyBucket", "Sum", App=app):
        buckets[metric.dims.get("LeMs", "inf")] += metric.total()
    cdf = latency_cdf(buckets)
    modules = _modules(inp, app)
    # the app's part of the bill
    if fleet_source == "workers":
        usd = (
            sum(row["machine_seconds"] * inp.prices.get(row["hardware"], 0.0) for row in modules.values())
            / 3600
        )
    else:
        part = latest.app_billed_per_hour.get(app) if latest else None
        share = (
            part / latest.billed_per_hour if latest and part is not None and latest.billed_per_hour else None
        )
        usd = fleet["observed_usd"] * share if share is not None else None
    machine_s = sum(row["machine_seconds"] for row in modules.values())
    busy_cost = sum(
        inp.prices.get(row["hardware"], 0.0) * (row["occupancy"] or 0.0) * row["machine_seconds"]
        for row in modules.values()
    )
    return {
        "slo_s": dep.slo_s if dep else None,
        "planned_frame_rate": dep.frame_rate if dep else None,
        "planned_billed_per_hour": (latest.app_billed_per_hour.get(app) if latest else None)
        or (dep.plan.billed_per_hour if dep else None),
        "planned_dedicated_per_hour": dep.plan.billed_per_hour if dep else None,
        "planned_occupancy_per_hour": dep.plan.cost_per_hour if dep else None,
        "frames": frames,
        "rejected": dict(rejected),
        "frames_completed": completed,
        "frames_dropped": _sum(_of(inp.series, "FramesDropped", "Sum", App=app)),
        "slo_attainment": within / completed if completed else None,
        "latency_mean_s": _sum(_of(inp.series, "EndToEndLatencyMs", "Sum", App=app)) / lat_n / 1e3
        if lat_n
        else None,
        "latency_max_s": max(lat_max) / 1e3 if lat_max else None,
        "latency_p50_le_s": _edge_s(quantile_from_cdf(cdf, 0.50)),
        "latency_p95_le_s": _edge_s(quantile_from_cdf(cdf, 0.95)),
        "latency_p99_le_s": _edge_s(quantile_from_cdf(cdf, 0.99)),
        "latency_cdf": [[edge if math.isfinite(edge) else None, fraction] for edge, fraction in cdf],
        "billed_usd": usd,
        "cost_per_1000_frames": usd / frames * 1000 if usd is not None and frames > 0 else None,
        "machine_seconds": machine_s,
        "observed_occupancy": (
            sum((row["occupancy"] or 0.0) * row["machine_seconds"] for row in modules.values()) / machine_s
            if machine_s > 0
            else None
        ),
        "busy_usd": busy_cost / 3600,
        "modules": modules,
    }


def _edge_s(edge_ms: float | None) -> float | None:
    if edge_ms is None:
        return None
    return edge_ms / 1e3 if math.isfinite(edge_ms) else math.inf


def compute_report(inp: ReportInput) -> dict[str, Any]:
    """Every figure of the report as a JSON-able dict (see the module doc)."""
    inst_all = _of(inp.series, "InstanceSeconds", "Sum")
    fleet_series = [metric for metric in inst_all if "App" not in metric.dims and "Hardware" in metric.dims]
    source = "instances"
    if not fleet_series:
        fleet_series = [metric for metric in inst_all if metric.dims.get("App") in inp.apps]
        source = "workers"
    fleet = _fleet(inp, fleet_series)
    fleet["source"] = source
    notes: list[str] = []
    missing = sorted({metric.dims.get("Hardware", "?") for metric in fleet_series} - set(inp.prices))
    if missing:
        notes.append(f"no price for {', '.join(missing)}: counted as 0")
    if fleet["interior_periods"] == 0:
        notes.append(
            "fewer than 3 periods of data: no steady-state figure (shorten --period or widen --since)"
        )
    if inp.plans.source == "none":
        notes.append("no plan found in the config table: planned figures are missing")
    apps = {app: _app(inp, app, fleet, source) for app in inp.apps}
    frames = sum(figures["frames"] for figures in apps.values())
    dp = data_plane(
        inp.series, inp.aws_prices, period_s=inp.period_s, frames=frames, front_memory_mb=inp.front_memory_mb
    )
    notes += _data_plane_notes(inp, dp)
    return {
        "window": {"start": inp.start, "end": inp.end, "period_s": inp.period_s},
        "plan_source": inp.plans.source,
        "plan_versions": [version.version for version in inp.plans.versions],
        "fleet": fleet,
        "apps": apps,
        "data_plane": dp,
        "total": grand_total(fleet, dp, frames),
        "notes": notes,
    }


def _data_plane_notes(inp: ReportInput, dp: dict[str, Any]) -> list[str]:
    notes: list[str] = []
    if not dp["services"]:
        notes.append(
            "no AwsRequests metrics in the window: the data plane's requests are not counted "
            "(SKINFLINT_USAGE_METERING off, or components older than the meter)"
        )
        return notes
    if inp.aws_prices is None:
        notes.append("no AWS price table: the data plane's requests are counted, not priced")
    elif dp["unpriced"]:
        notes.append(f"no AWS price for {', '.join(dp['unpriced'])}: counted as 0")
    has_ms = any(
        (metric.dims.get("Service"), metric.dims.get("Unit")) == FRONT_DURATION
        for metric in inp.series
        if metric.name == "AwsRequestUnits"
    )
    if has_ms and inp.front_memory_mb is None:
        notes.append("the front's memory size is unknown: its Lambda duration is not priced")
    return notes
