"""The report as one self-contained HTML page (tables, and the plots embedded as PNG data URIs)."""

from __future__ import annotations

import base64
import datetime as dt
import html
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["render_html"]

_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}th{background:#f4f4f4}"
    "td:first-child,th:first-child{text-align:left}.note{color:#a60}img{max-width:100%;margin:0.5em 0}"
)


_KINDS = {
    "usd": lambda value: f"${value:.4f}",
    "usd6": lambda value: f"${value:.6f}",  # the data plane's request bill: fractions of a cent
    "frac": lambda value: f"{value:.2%}",
    "ms": lambda value: "inf" if math.isinf(value) else f"{value * 1e3:.0f} ms",
}


def value_text(value: Any, kind: str = "", *, pct_places: int = 1) -> str:
    """A report figure as text (the page and the terminal): ``-`` for none; by ``kind`` (``usd``,
    ``usd6``, ``pct``: signed, ``pct_places`` decimals; ``frac``, ``ms``); else 4 significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if kind == "pct":
        return f"{value:+.{pct_places}%}"
    if kind in _KINDS:
        return str(_KINDS[kind](value))
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _fmt(value: Any, kind: str = "") -> str:
    text = value_text(value, kind)
    return text if kind == "pct" or kind in _KINDS or isinstance(value, float) else html.escape(text)


def _table(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{html.escape(label)}</th><td>{value}</td></tr>" for label, value in rows)
    return f"<table>{body}</table>"


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def _row(cells: tuple[str, ...], head: bool = False) -> str:
    tag = "th" if head else "td"
    return "<tr>" + "".join(f"<{tag}>{cell}</{tag}>" for cell in cells) + "</tr>"


def _data_plane(dp: dict[str, Any], total: dict[str, Any]) -> list[str]:
    """The data plane's AWS request bill per service, its total, the fleet's and both added up."""
    priced = f"priced at {dp['priced_at']}" if dp["priced_at"] else "not priced"
    head = ("service", "requests", "billing units", "USD (window)", "USD/h", "USD / 1000 frames")
    rows = [_row(head, head=True)]
    for name, service in dp["services"].items():
        units = (
            ", ".join(f"{html.escape(unit)} {count:,.6g}" for unit, count in service["billed_units"].items())
            or "-"
        )
        rows.append(
            _row(
                (
                    html.escape(name),
                    f"{service['requests']:,.0f}",
                    units,
                    _fmt(service["usd"], "usd6"),
                    _fmt(service["usd_per_hour"], "usd6"),
                    _fmt(service["usd_per_1000_frames"], "usd6"),
                )
            )
        )
    totals = (
        ("data plane total", dp, ""),
        ("fleet (billed)", total, "fleet_"),
        ("fleet + data plane", total, ""),
    )
    for label, src, pre in totals:
        figures = (src[f"{pre}usd"], src[f"{pre}usd_per_hour"], src[f"{pre}usd_per_1000_frames"])
        rows.append(_row((f"<b>{label}</b>", "", "", *(_fmt(value, "usd6") for value in figures))))
    return [
        f"<h2>Data plane (AWS requests), {html.escape(priced)}</h2>",
        f"<table>{''.join(rows)}</table>",
        f"<p>data plane share of the total: {_fmt(total['data_plane_share'], 'frac')}; prices: "
        f"{html.escape(dp['prices_source'] or '-')}</p>",
    ]


def render_html(report: dict[str, Any], plots: dict[str, Path]) -> str:
    window = report["window"]
    when = (
        f"{dt.datetime.fromtimestamp(window['start'], dt.UTC):%Y-%m-%d %H:%M:%S} to "
        f"{dt.datetime.fromtimestamp(window['end'], dt.UTC):%H:%M:%S} UTC, period {window['period_s']} s"
    )
    fleet = report["fleet"]
    parts = [
        "<html><head><meta charset='utf-8'><title>Skinflint cost report</title>",
        f"<style>{_CSS}</style></head><body><h1>Skinflint cost report</h1>",
        f"<p>{html.escape(when)}; plans from the {html.escape(report['plan_source'])}</p>",
        f"<h2>Fleet ({html.escape(fleet['source'])})</h2>",
        _table(
            [
                ("planned USD/h (steady)", _fmt(fleet["planned_per_hour_steady"], "usd")),
                ("observed USD/h (steady)", _fmt(fleet["observed_per_hour_steady"], "usd")),
                ("observed vs planned (steady)", _fmt(fleet["deviation_steady"], "pct")),
                ("observed USD/h (window)", _fmt(fleet["observed_per_hour_window"], "usd")),
                ("billed USD in the window", _fmt(fleet["observed_usd"], "usd")),
                ("planned USD in the window", _fmt(fleet["planned_usd"], "usd")),
                ("periods with data / interior", f"{fleet['active_periods']} / {fleet['interior_periods']}"),
            ]
            + [(f"instance-seconds {hw}", _fmt(seconds)) for hw, seconds in fleet["instance_seconds"].items()]
        ),
    ]
    if "cost" in plots:
        parts.append(_img(plots["cost"]))
    if report.get("data_plane") is not None:
        parts += _data_plane(report["data_plane"], report["total"])
    for app, figures in report["apps"].items():
        parts.append(f"<h2>{html.escape(app)}</h2>")
        parts.append(
            _table(
                [
                    ("planned billed USD/h (its part)", _fmt(figures["planned_billed_per_hour"], "usd")),
                    ("planned occupancy USD/h", _fmt(figures["planned_occupancy_per_hour"], "usd")),
                    ("billed USD (its part)", _fmt(figures["billed_usd"], "usd")),
                    ("observed occupancy (busy / capacity)", _fmt(figures["observed_occupancy"], "frac")),
                    ("frames accepted", _fmt(figures["frames"])),
                    ("cost per 1,000 frames", _fmt(figures["cost_per_1000_frames"], "usd")),
                    ("SLO", _fmt(figures["slo_s"], "ms")),
                    ("SLO attainment", _fmt(figures["slo_attainment"], "frac")),
                    (
                        "frames finished / dropped",
                        f"{_fmt(figures['frames_completed'])} / {_fmt(figures['frames_dropped'])}",
                    ),
                    (
                        "latency mean / max",
                        f"{_fmt(figures['latency_mean_s'], 'ms')} / {_fmt(figures['latency_max_s'], 'ms')}",
                    ),
                    (
                        "latency p50 / p95 / p99 (at most)",
                        " / ".join(
                            _fmt(figures[f"latency_p{percentile}_le_s"], "ms") for percentile in (50, 95, 99)
                        ),
                    ),
                    (
                        "rejected",
                        html.escape(
                            ", ".join(
                                f"{reason}: {count:g}"
                                for reason, count in sorted(figures["rejected"].items())
                            )
                            or "-"
                        ),
                    ),
                ]
            )
        )
        head = "".join(
            f"<th>{heading}</th>"
            for heading in (
                "module @ hardware",
                "machine-s",
                "occupancy",
                "batches",
                "fill",
                "empty slots",
                "drops",
                "duplicates",
                "latency max",
                "planned worst",
            )  # fmt: skip
        )
        rows = "".join(
            "<tr>"
            + "".join(
                f"<td>{column}</td>"
                for column in (
                    html.escape(name),
                    _fmt(module["machine_seconds"]),
                    _fmt(module["occupancy"], "frac"),
                    _fmt(module["batches"]),
                    _fmt(module["batch_fill"], "frac"),
                    _fmt(module["empty_slot_fraction"], "frac"),
                    _fmt(module["drops"]),
                    _fmt(module["duplicates"]),
                    _fmt(module["latency_max_s"], "ms"),
                    _fmt(module["planned_worst_s"], "ms"),
                )
            )
            + "</tr>"
            for name, module in figures["modules"].items()
        )
        parts.append(f"<table><tr>{head}</tr>{rows}</table>")
        if f"latency_cdf_{app}" in plots:
            parts.append(_img(plots[f"latency_cdf_{app}"]))
    parts += [f"<p class='note'>{html.escape(note)}</p>" for note in report["notes"]]
    parts.append("</body></html>")
    return "\n".join(parts)
