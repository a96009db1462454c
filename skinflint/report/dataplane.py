"""The data plane's AWS request bill (pure: no AWS, no clock): what the components counted
(``AwsRequests``: Component, Service, Operation; ``AwsRequestUnits``: Component, Service, Unit --
core/adapters/usage.py) priced with the price table (``profiles/aws_prices.json``).

- A counted unit is priced as it is (DynamoDB's read and write request units, SQS's 64 KB requests,
  CloudWatch's requests and metrics requested, S3's request classes, API Gateway and Lambda requests),
  except the front's Lambda ``DurationMs``, billed as GB-seconds = ms / 1000 x the front's memory
  (MB) / 1024, and a price ``of`` another unit (WAF: one request per API Gateway request).
- USD/h is the window's USD over the periods with counts (as the fleet's window figure); USD per
  1,000 frames divides by the frames accepted in the window.
- Without a price table (or a unit it does not price), USD figures are None (counted as 0 in the
  totals, with a note).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from profiles.aws_prices import AwsPrices
    from skinflint.report.cloudwatch import Series

__all__ = ["FRONT_DURATION", "GB_SECONDS", "data_plane", "grand_total"]

FRONT_DURATION = ("lambda", "DurationMs")  # the front's handler milliseconds, as counted
GB_SECONDS = ("lambda", "GBSeconds")  # what Lambda bills them as

_Units = dict[tuple[str, str, str], float]  # (component, service, unit) -> units


def _billed_units(counted: _Units, prices: AwsPrices | None, memory_mb: float | None) -> _Units:
    """The units AWS bills, per component: the counted ones, the front's milliseconds as GB-seconds
    and the units billed per another unit (``of``)."""
    out: _Units = defaultdict(float)
    for (comp, service, unit), count in counted.items():
        if (service, unit) == FRONT_DURATION:
            if memory_mb is not None:
                out[(comp, *GB_SECONDS)] += count / 1e3 * memory_mb / 1024
            continue
        out[(comp, service, unit)] += count
    for service, unit, of_service, of_unit in prices.derived() if prices else ():
        for (comp, counted_service, un), count in counted.items():
            if (counted_service, un) == (of_service, of_unit):
                out[(comp, service, unit)] += count
    return dict(out)


def _per(usd: float | None, hours: float, frames: float) -> tuple[float | None, float | None]:
    per_hour = usd / hours if usd is not None and hours > 0 else None
    per_1000 = usd / frames * 1000 if usd is not None and frames > 0 else None
    return per_hour, per_1000


def data_plane(
    series: Iterable[Series],
    prices: AwsPrices | None,
    *,
    period_s: int,
    frames: float,
    front_memory_mb: float | None,
) -> dict[str, Any]:
    """The data plane's requests, billing units and USD: per service (and per operation and component
    within it), per component and in total. ``frames``: frames accepted in the window."""
    req = [metric for metric in series if metric.name == "AwsRequests" and metric.stat == "Sum"]
    cnt = [metric for metric in series if metric.name == "AwsRequestUnits" and metric.stat == "Sum"]
    periods = {start for metric in (*req, *cnt) for start in metric.points}
    hours = len(periods) * period_s / 3600.0
    counted: _Units = defaultdict(float)
    for metric in cnt:
        key = (
            metric.dims.get("Component", "?"),
            metric.dims.get("Service", "?"),
            metric.dims.get("Unit", "?"),
        )
        counted[key] += metric.total()
    billed = _billed_units(counted, prices, front_memory_mb)
    unpriced: set[str] = set()
    services: dict[str, dict[str, Any]] = {}
    components: dict[str, dict[str, Any]] = {}

    def service(name: str) -> dict[str, Any]:
        return services.setdefault(
            name, {"requests": 0.0, "units": {}, "billed_units": {}, "usd_by_unit": {}, "operations": {}}
        )

    def component(name: str) -> dict[str, Any]:
        return components.setdefault(name, {"requests": 0.0, "usd": 0.0})

    for metric in req:
        comp, name, op = (metric.dims.get(dim, "?") for dim in ("Component", "Service", "Operation"))
        requests = metric.total()
        if not requests:  # a series ListMetrics knows, with no data point in the window
            continue
        svc = service(name)
        svc["requests"] += requests
        operation = svc["operations"].setdefault(op, {"requests": 0.0, "by_component": {}})
        operation["requests"] += requests
        operation["by_component"][comp] = operation["by_component"].get(comp, 0.0) + requests
        component(comp)["requests"] += requests
    for (_, name, unit), count in counted.items():
        if not count:
            continue
        units = service(name)["units"]
        units[unit] = units.get(unit, 0.0) + count
    for (comp, name, unit), count in billed.items():
        if not count:
            continue
        svc = service(name)
        svc["billed_units"][unit] = svc["billed_units"].get(unit, 0.0) + count
        price = prices.price(name, unit) if prices else None
        if price is None:
            unpriced.add(f"{name} {unit}")
            continue
        usd = price.cost(count)
        svc["usd_by_unit"][unit] = svc["usd_by_unit"].get(unit, 0.0) + usd
        component(comp)["usd"] += usd
    for name, svc in services.items():
        if name == "wafv2" and not svc["requests"]:  # inspected: one per API request
            svc["requests"] = svc["billed_units"].get("Requests", 0.0)
        svc["usd"] = sum(svc["usd_by_unit"].values()) if prices else None
        svc["usd_per_hour"], svc["usd_per_1000_frames"] = _per(svc["usd"], hours, frames)
    total = sum(svc["usd"] or 0.0 for svc in services.values()) if prices else None
    per_hour, per_1000 = _per(total, hours, frames)
    return {
        "priced_at": prices.label if prices else None,
        "prices_as_of": prices.as_of if prices else None,
        "prices_region": prices.region if prices else None,
        "prices_source": prices.source if prices else None,
        "front_memory_mb": front_memory_mb,
        "requests": sum(svc["requests"] for name, svc in services.items() if name != "wafv2"),
        "usd": total,
        "usd_per_hour": per_hour,
        "usd_per_1000_frames": per_1000,
        "frames": frames,
        "active_periods": len(periods),
        "services": dict(sorted(services.items(), key=lambda kv: -(kv[1]["usd"] or 0.0))),
        "components": dict(sorted(components.items())),
        "unpriced": sorted(unpriced) if prices else [],
    }


def grand_total(fleet: dict[str, Any], dp: dict[str, Any], frames: float) -> dict[str, Any]:
    """The fleet's billed cost and the data plane's, side by side and added up (the window)."""
    fleet_usd = fleet.get("observed_usd")
    dp_usd = dp.get("usd")
    usd = (fleet_usd or 0.0) + (dp_usd or 0.0) if fleet_usd is not None or dp_usd is not None else None
    fleet_h, dp_h = fleet.get("observed_per_hour_window"), dp.get("usd_per_hour")
    return {
        "fleet_usd": fleet_usd,
        "data_plane_usd": dp_usd,
        "usd": usd,
        "fleet_usd_per_hour": fleet_h,
        "data_plane_usd_per_hour": dp_h,
        "usd_per_hour": (fleet_h or 0.0) + (dp_h or 0.0) if fleet_h is not None or dp_h is not None else None,
        "fleet_usd_per_1000_frames": fleet_usd / frames * 1000 if fleet_usd is not None and frames else None,
        "data_plane_usd_per_1000_frames": dp.get("usd_per_1000_frames"),
        "usd_per_1000_frames": usd / frames * 1000 if usd is not None and frames else None,
        "data_plane_share": dp_usd / usd if dp_usd is not None and usd else None,
        "frames": frames,
    }
