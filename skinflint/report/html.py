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
    "usd": lambda v: f"${v:.4f}",
    "usd6": lambda v: f"${v:.6f}",  # the data plane's request bill: fractions of a cent
    "frac": lambda v: f"{v:.2%}",
    "ms": lambda v: "inf" if math.isinf(v) else f"{v * 1e3:.0f} ms",
}


def value_text(v: Any, kind: str = "", *, pct_places: int = 1) -> str:
    """A report figure as text (the page and the terminal): ``-`` for none; by ``kind`` (``usd``,
    ``usd6``, ``pct``: signed, ``pct_places`` decimals; ``frac``, ``ms``); else 4 significant digits."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if kind == "pct":
        return f"{v:+.{pct_places}%}"
    if kind in _KINDS:
        return str(_KINDS[kind](v))
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _fmt(v: Any, kind: str = "") -> str:
    text = value_text(v, kind)
    return text if kind == "pct" or kind in _KINDS or isinstance(v, float) else html.escape(text)


def _table(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def _row(cells: tuple[str, ...], head: bool = False) -> str:
    tag = "th" if head else "td"
    return "<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>"


def _data_plane(dp: dict[str, Any], total: dict[str, Any]) -> list[str]:
    """The data plane's AWS request bill per service, its total, the fleet's and both added up."""
    priced = f"priced at {dp['priced_at']}" if dp["priced_at"] else "not priced"
    head = ("service", "requests", "billing units", "USD (window)", "USD/h", "USD / 1000 frames")
    rows = [_row(head, head=True)]
    for name, s in dp["services"].items():
        units = ", ".join(f"{html.escape(u)} {v:,.6g}" for u, v in s["billed_units"].items()) or "-"
        rows.append(
            _row(
                (
                    html.escape(name),
                    f"{s['requests']:,.0f}",
                    units,
                    _fmt(s["usd"], "usd6"),
                    _fmt(s["usd_per_hour"], "usd6"),
                    _fmt(s["usd_per_1000_frames"], "usd6"),
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
        rows.append(_row((f"<b>{label}</b>", "", "", *(_fmt(v, "usd6") for v in figures))))
    return [
        f"<h2>Data plane (AWS requests), {html.escape(priced)}</h2>",
        f"<table>{''.join(rows)}</table>",
        f"<p>data plane share of the total: {_fmt(total['data_plane_share'], 'frac')}; prices: "
        f"{html.escape(dp['prices_source'] or '-')}</p>",
    ]


def render_html(report: dict[str, Any], plots: dict[str, Path]) -> str:
    w = report["window"]
    when = (
        f"{dt.datetime.fromtimestamp(w['start'], dt.UTC):%Y-%m-%d %H:%M:%S} to "
        f"{dt.datetime.fromtimestamp(w['end'], dt.UTC):%H:%M:%S} UTC, period {w['period_s']} s"
    )
    f = report["fleet"]
    parts = [
        "<html><head><meta charset='utf-8'><title>Skinflint cost report</title>",
        f"<style>{_CSS}</style></head><body><h1>Skinflint cost report</h1>",
        f"<p>{html.escape(when)}; plans from the {html.escape(report['plan_source'])}</p>",
        f"<h2>Fleet ({html.escape(f['source'])})</h2>",
        _table(
            [
                ("planned USD/h (steady)", _fmt(f["planned_per_hour_steady"], "usd")),
                ("observed USD/h (steady)", _fmt(f["observed_per_hour_steady"], "usd")),
                ("observed vs planned (steady)", _fmt(f["deviation_steady"], "pct")),
                ("observed USD/h (window)", _fmt(f["observed_per_hour_window"], "usd")),
                ("billed USD in the window", _fmt(f["observed_usd"], "usd")),
                ("planned USD in the window", _fmt(f["planned_usd"], "usd")),
                ("periods with data / interior", f"{f['active_periods']} / {f['interior_periods']}"),
            ]
            + [(f"instance-seconds {hw}", _fmt(s)) for hw, s in f["instance_seconds"].items()]
        ),
    ]
    if "cost" in plots:
        parts.append(_img(plots["cost"]))
    if report.get("data_plane") is not None:
        parts += _data_plane(report["data_plane"], report["total"])
    for app, a in report["apps"].items():
        parts.append(f"<h2>{html.escape(app)}</h2>")
        parts.append(
            _table(
                [
                    ("planned billed USD/h (its part)", _fmt(a["planned_billed_per_hour"], "usd")),
                    ("planned occupancy USD/h", _fmt(a["planned_occupancy_per_hour"], "usd")),
                    ("billed USD (its part)", _fmt(a["billed_usd"], "usd")),
                    ("observed occupancy (busy / capacity)", _fmt(a["observed_occupancy"], "frac")),
                    ("frames accepted", _fmt(a["frames"])),
                    ("cost per 1,000 frames", _fmt(a["cost_per_1000_frames"], "usd")),
                    ("SLO", _fmt(a["slo_s"], "ms")),
                    ("SLO attainment", _fmt(a["slo_attainment"], "frac")),
                    (
                        "frames finished / dropped",
                        f"{_fmt(a['frames_completed'])} / {_fmt(a['frames_dropped'])}",
                    ),
                    (
                        "latency mean / max",
                        f"{_fmt(a['latency_mean_s'], 'ms')} / {_fmt(a['latency_max_s'], 'ms')}",
                    ),
                    (
                        "latency p50 / p95 / p99 (at most)",
                        " / ".join(_fmt(a[f"latency_p{q}_le_s"], "ms") for q in (50, 95, 99)),
                    ),
                    (
                        "rejected",
                        html.escape(
                            ", ".join(f"{k}: {v:g}" for k, v in sorted(a["rejected"].items())) or "-"
                        ),
                    ),
                ]
            )
        )
        head = "".join(
            f"<th>{h}</th>"
            for h in (
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
                f"<td>{c}</td>"
                for c in (
                    html.escape(name),
                    _fmt(m["machine_seconds"]),
                    _fmt(m["occupancy"], "frac"),
                    _fmt(m["batches"]),
                    _fmt(m["batch_fill"], "frac"),
                    _fmt(m["empty_slot_fraction"], "frac"),
                    _fmt(m["drops"]),
                    _fmt(m["duplicates"]),
                    _fmt(m["latency_max_s"], "ms"),
                    _fmt(m["planned_worst_s"], "ms"),
                )
            )
            + "</tr>"
            for name, m in a["modules"].items()
        )
        parts.append(f"<table><tr>{head}</tr>{rows}</table>")
        if f"latency_cdf_{app}" in plots:
            parts.append(_img(plots[f"latency_cdf_{app}"]))
    parts += [f"<p class='note'>{html.escape(n)}</p>" for n in report["notes"]]
    parts.append("</body></html>")
    return "\n".join(parts)
