"""``skinflint report``: what the deployment cost and what it delivered, from CloudWatch metrics and
the plans in the config table -- for the fleet, planned against billed USD/h (whole instances x the
catalog's price), in steady state and over the window; per app, its part of the bill, observed
occupancy, frames, cost per 1,000 frames, SLO attainment, end-to-end latency, rejections and drops,
and per module the machine time, batches, empty slots and worst latency against the plan; the data
plane's AWS requests (DynamoDB, SQS, CloudWatch, S3, API Gateway, WAF and the front's Lambda, as the
components count them) priced at the list prices of ``profiles/aws_prices.json`` (``--aws-prices``),
next to the fleet's billed cost and added to it. ``--plots DIR`` writes PNGs (cost over time, each
app's latency CDF against its SLO), ``--html FILE`` a self-contained page. Works against real
CloudWatch (your AWS credentials) and against the local stack's moto (``--endpoint``: the URL
``skinflint up`` logs as "moto server on ...")."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from skinflint.commands.apps import check_client_settings
from skinflint.errors import UsageError

__all__ = ["build_report", "parse_duration", "print_report"]

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*")
LOCAL_PERIOD_S = 10  # moto keeps every data point: a fine period gives more interior periods
CLOUDWATCH_PERIOD_S = 60  # standard-resolution metrics: one minute is the finest period


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``5m``, ``1.5h``, ``2d`` -> seconds (argparse type)."""
    match = _DURATION.fullmatch(text or "")
    if not match or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive duration (e.g. 90s, 5m, 1h)")
    return float(match.group(1)) * _UNITS[match.group(2)]


def register(sub: Any) -> None:
    parser = sub.add_parser("report", help="cost and SLO report from CloudWatch metrics", description=__doc__)
    parser.add_argument(
        "--since", type=parse_duration, default=3600.0, help="window back from now (default 1h)"
    )
    parser.add_argument(
        "--app", action="append", dest="apps", metavar="APP", help="app to report (repeatable)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--html", default=None, metavar="FILE", help="write a self-contained HTML report")
    parser.add_argument("--plots", default=None, metavar="DIR", help="write PNG plots into DIR")
    parser.add_argument("--endpoint", default=None, metavar="URL", help="moto's URL (the local stack)")
    parser.add_argument(
        "--period",
        type=int,
        default=None,
        metavar="SECONDS",
        help=f"seconds per data point, a positive whole number (default {CLOUDWATCH_PERIOD_S}; "
        f"{LOCAL_PERIOD_S} with --endpoint)",
    )
    parser.add_argument(
        "--region", default=None, help="AWS region (default: AWS_DEFAULT_REGION or us-east-1)"
    )
    parser.add_argument(
        "--aws-prices",
        default=None,
        metavar="FILE",
        help="price table of the data plane's AWS requests (default: the packaged profiles/aws_prices.json, "
        "us-east-1 list prices entered by hand: see its as_of and source)",
    )
    parser.set_defaults(func=run)


def _prices() -> dict[str, float]:
    # CLI start-up: loaded when this command runs
    from profiles.hardware import load_catalog

    return {name: float(spec.price_per_hour) for name, spec in load_catalog().items()}


def _aws_prices(path: str | None) -> Any:
    """The data plane's price table (:class:`profiles.aws_prices.AwsPrices`); a missing or malformed
    file is a one-line :class:`UsageError`."""
    # CLI start-up: loaded when this command runs
    from profiles.aws_prices import load_aws_prices
    from profiles.errors import ProfilesError

    try:
        return load_aws_prices(path)
    except ProfilesError as exc:
        raise UsageError(str(exc)) from None


def _front_memory_mb() -> int:
    """The front Lambda's memory size the CDK stack deploys (MB): its milliseconds -> GB-seconds."""
    # CLI start-up: loaded when this command runs
    from cdk.constants import FRONT_MEMORY_MB

    return FRONT_MEMORY_MB


def build_report(
    *,
    endpoint: str | None,
    apps: list[str] | None,
    start: float,
    end: float,
    period: int | None = None,
    region: str | None = None,
    aws_prices: str | None = None,
) -> dict[str, Any]:
    """Read CloudWatch and the config table and compute the report. ``period`` is in seconds, None
    for the default (:data:`CLOUDWATCH_PERIOD_S`, :data:`LOCAL_PERIOD_S` against an endpoint);
    ``aws_prices`` the data plane's price table (None: the packaged one). Raises
    :class:`UsageError`: a period that is not positive; a malformed setting, region, endpoint or price
    table; a failure of AWS, as ``skinflint apps`` reports one."""
    if period is not None and period <= 0:  # 0 is given, not "use the default"
        raise UsageError(f"--period must be a positive number of seconds, got {period}")
    table = _aws_prices(aws_prices)
    # CLI start-up: loaded when this command runs
    from core.adapters._aws import AWS_ERRORS
    from core.clients import make_client
    from core.errors import DataPlaneError
    from core.settings import DataPlaneConfig
    from skinflint.local.stack import FAKE_CREDENTIALS
    from skinflint.report import ReportError, collect_report

    try:
        base = DataPlaneConfig.from_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    cfg = DataPlaneConfig(
        region=region or base.region,
        endpoint_url=endpoint or base.endpoint_url,
        config_table=base.config_table,
        metrics_namespace=base.metrics_namespace,
    )
    check_client_settings(cfg)
    if cfg.endpoint_url:  # moto takes any credentials; never reach for real ones
        for key, value in FAKE_CREDENTIALS.items():
            os.environ.setdefault(key, value)
    if period is not None:
        period_s = period
    else:
        period_s = LOCAL_PERIOD_S if cfg.endpoint_url else CLOUDWATCH_PERIOD_S
    # a failure of AWS, as the adapters wrap it or raw; a ParamValidationError is a bug of ours: it propagates
    failures: tuple[type[Exception], ...] = (DataPlaneError, ReportError, *AWS_ERRORS)
    try:
        report = collect_report(
            make_client("cloudwatch", cfg),
            make_client("dynamodb", cfg),
            namespace=cfg.metrics_namespace,
            config_table=cfg.config_table,
            prices=_prices(),
            start=start,
            end=end,
            period_s=period_s,
            apps=apps,
            aws_prices=table,
            front_memory_mb=_front_memory_mb(),
        )
    except failures as exc:
        where = cfg.endpoint_url or f"CloudWatch in {cfg.region}"
        raise UsageError(f"cannot build the report from {where}: {str(exc).splitlines()[0]}") from exc
    report["endpoint"] = cfg.endpoint_url
    return report


# -- output ------------------------------------------------------------------------------------------


def _f(value: Any, kind: str = "") -> str:
    # CLI start-up: loaded when this command runs
    from skinflint.report.html import value_text

    return value_text(value, kind, pct_places=2)


def print_report(report: dict[str, Any]) -> None:
    # CLI start-up: loaded when this command runs
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if Console().is_terminal else 150)
    fleet = report["fleet"]
    head = Table(
        title=f"cost report: fleet ({fleet['source']}), period {report['window']['period_s']} s",
        show_header=False,
    )
    head.add_column(style="bold")
    head.add_column()
    for label, value in [
        ("planned USD/h (steady)", _f(fleet["planned_per_hour_steady"], "usd")),
        ("observed USD/h (steady)", _f(fleet["observed_per_hour_steady"], "usd")),
        ("observed vs planned (steady)", _f(fleet["deviation_steady"], "pct")),
        ("observed USD/h (window)", _f(fleet["observed_per_hour_window"], "usd")),
        (
            "billed / planned USD in the window",
            f"{_f(fleet['observed_usd'], 'usd')} / {_f(fleet['planned_usd'], 'usd')}",
        ),
        (
            "instance-seconds",
            ", ".join(f"{hw} {seconds:.0f}" for hw, seconds in fleet["instance_seconds"].items()) or "-",
        ),
        ("periods with data / interior", f"{fleet['active_periods']} / {fleet['interior_periods']}"),
        (
            "plans",
            f"{report['plan_source']} (versions {', '.join(map(str, report['plan_versions'])) or '-'})",
        ),
    ]:
        head.add_row(label, value)
    console.print(head)
    apps = Table(title="per app")
    cols = ["app", "planned USD/h", "billed USD", "occupancy", "frames", "USD / 1000 frames", "SLO",
            "SLO attainment", "finished / dropped", "latency mean / max", "p50 / p95 / p99 (at most)",
            "rejected"]  # fmt: skip
    for column in cols:
        apps.add_column(column)
    for name, app in report["apps"].items():
        apps.add_row(
            name,
            _f(app["planned_billed_per_hour"], "usd"),
            _f(app["billed_usd"], "usd"),
            _f(app["observed_occupancy"], "frac"),
            _f(app["frames"]),
            _f(app["cost_per_1000_frames"], "usd"),
            _f(app["slo_s"], "ms"),
            _f(app["slo_attainment"], "frac"),
            f"{_f(app['frames_completed'])} / {_f(app['frames_dropped'])}",
            f"{_f(app['latency_mean_s'], 'ms')} / {_f(app['latency_max_s'], 'ms')}",
            " / ".join(_f(app[f"latency_p{percentile}_le_s"], "ms") for percentile in (50, 95, 99)),
            ", ".join(f"{reason} {count:g}" for reason, count in sorted(app["rejected"].items())) or "-",
        )
    console.print(apps)
    mods = Table(title="per module")
    for column in ("app", "module @ hardware", "machine-s", "device occupancy (planned / measured)",
              "prepare ms (mean / wait max)", "batches", "fill", "empty slots", "drops", "duplicates",
              "latency max", "planned worst"):  # fmt: skip
        mods.add_column(column)
    for name, app in report["apps"].items():
        for mname, module in app["modules"].items():
            mods.add_row(
                name,
                mname,
                f"{module['machine_seconds']:.0f}",
                f"{_f(module['planned_occupancy'], 'frac')} / {_f(module['occupancy'], 'frac')}",
                f"{_f(module['prepare_ms_mean'])} / {_f(module['prepare_wait_ms_max'])}",
                _f(module["batches"]),
                _f(module["batch_fill"], "frac"),
                _f(module["empty_slot_fraction"], "frac"),
                _f(module["drops"]),
                _f(module["duplicates"]),
                _f(module["latency_max_s"], "ms"),
                _f(module["planned_worst_s"], "ms"),
            )
    console.print(mods)
    if report.get("data_plane") is not None:
        _print_data_plane(console, report["data_plane"], report["total"])
    for note in report["notes"]:
        console.print(f"note: {note}")
    for label, value in (report.get("files") or {}).items():
        console.print(f"{label}: {value}")


def _units_text(units: dict[str, float]) -> str:
    return ", ".join(f"{unit} {count:,.6g}" for unit, count in units.items()) or "-"


def _print_data_plane(console: Any, dp: dict[str, Any], total: dict[str, Any]) -> None:
    # CLI start-up: loaded when this command runs
    from rich.table import Table

    priced = f"priced at {dp['priced_at']}" if dp["priced_at"] else "not priced"
    table = Table(title=f"Data plane (AWS requests), {priced}")
    for column in ("service", "requests", "billing units", "USD (window)", "USD/h", "USD / 1000 frames"):
        table.add_column(column)
    for name, service in dp["services"].items():
        table.add_row(
            name,
            f"{service['requests']:,.0f}",
            _units_text(service["billed_units"]),
            _f(service["usd"], "usd6"),
            _f(service["usd_per_hour"], "usd6"),
            _f(service["usd_per_1000_frames"], "usd6"),
        )
    table.add_row(
        "data plane total",
        f"{dp['requests']:,.0f}",
        "",
        _f(dp["usd"], "usd6"),
        _f(dp["usd_per_hour"], "usd6"),
        _f(dp["usd_per_1000_frames"], "usd6"),
        style="bold",
    )
    table.add_row(
        "fleet (billed)",
        "",
        "",
        _f(total["fleet_usd"], "usd6"),
        _f(total["fleet_usd_per_hour"], "usd6"),
        _f(total["fleet_usd_per_1000_frames"], "usd6"),
    )
    table.add_row(
        "fleet + data plane",
        "",
        f"data plane {_f(total['data_plane_share'], 'frac')} of it",
        _f(total["usd"], "usd6"),
        _f(total["usd_per_hour"], "usd6"),
        _f(total["usd_per_1000_frames"], "usd6"),
        style="bold",
    )
    console.print(table)


def write_outputs(report: dict[str, Any], plots_dir: str | None, html_file: str | None) -> dict[str, str]:
    # CLI start-up: loaded when this command runs
    from skinflint.report.html import render_html
    from skinflint.report.plots import write_plots

    files: dict[str, str] = {}
    if not plots_dir and not html_file:
        return files
    target = Path(plots_dir) if plots_dir else Path(tempfile.mkdtemp(prefix="skinflint-report-"))
    plots = write_plots(report, target)
    if plots_dir:
        files.update({f"plot {name}": str(path) for name, path in plots.items()})
    if html_file:
        Path(html_file).write_text(render_html(report, plots))
        files["html"] = str(Path(html_file).resolve())
    return files


def run(args: argparse.Namespace) -> int:
    end = math.ceil(time.time()) + 1.0  # end is exclusive and whole seconds: include this second's points
    report = build_report(
        endpoint=args.endpoint,
        apps=args.apps,
        start=end - args.since,
        end=end,
        period=args.period,
        region=args.region,
        aws_prices=args.aws_prices,
    )
    report["files"] = write_outputs(report, args.plots, args.html)
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    else:
        print_report(report)
    return 0
