"""``skinflint bench tco``: the all-in cost of every demo app, $ per million frames itemised by service,
for the data plane as the code is (``today``: a frame per POST; ``today_batch``: N frames per POST,
results pulled from the results table; ``today_push``: the same with the app's results pushed to its
SQS results queue; ``today_rest_waf``: with the REST API + WAF option instead of the HTTP API), the
wire before messages were packed and children cropped (``per_task``, N frames per POST, for
comparison), beside two ways a user could serve the same models instead (docs/cost.md):

- **Triton on EC2 behind an ALB**: the same models on the same hardware at the same measured (or
  derived) throughputs, one HTTP request per frame, the DAG in one server (an ensemble: no queues, no
  per-task storage). Low: each module's offered rate on its configuration of least $ per request
  (fractional machines, no headroom, no latency bound); high: the cheapest packed fleet among the plans
  (whole instances). Plus the ALB's hour and its LCUs (processed bytes: the frames, binary; keep-alive
  connections, 10 rules or fewer).
- **SageMaker real-time endpoints**: one endpoint per module (model), each on the machines the plan gives
  that module (no packing across endpoints), at the ``ml.`` instance price of the same instance type,
  plus SageMaker's data processed in (frames to the roots, a crop per child task) and out. The caller
  that chains the endpoints (a client or a Lambda per frame) is not counted.

Every app is planned as ``skinflint plan APP --rate R`` plans it (the control loop's defaults, not the
environment's), once per batch floor; each design is priced on the floor plan of least all-in cost for
it, as the control loop's all-in objective chooses (control/objective.py). Prices:
``profiles/aws_prices.json`` (from memory, dated) and ``profiles/hardware.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.errors import OptionError, ScenarioError
from bench.results import add_results_arguments, record
from control.config import ControlConfig
from control.errors import ControlError
from control.preview import AllInSpec, preview_app, reprice
from control.spec import profile_lookup
from profiles.allin import GB, PER_TASK, SERVICES, TODAY
from profiles.aws_prices import load_aws_prices
from profiles.errors import ProfilesError
from profiles.store import PACKAGE_ROOT, LocalStore

if TYPE_CHECKING:
    import argparse

    from bench.results import Recording
    from control.preview import AppPreview
    from profiles.aws_prices import AwsPrices

__all__ = ["PLOT", "add_arguments", "run_command", "tco"]

APPS = ("traffic", "face", "pose", "caption", "actdet")
PLOT = "tco.png"
DESIGNS = ("today", "today_batch", "today_push", "today_rest_waf", "per_task", "triton_alb", "sagemaker")
TARGET_DESIGNS = ("today_batch", "today_push")  # issue #25's target rows: the code at N frames per POST
ALB_FREE_RULES = 10  # rule evaluations: the first 10 rules of a request are free
TARGET_USD_PER_M = 1.50  # issue #25: traffic, 8 KB, 10 frames per POST, 1,000 frames/s


def _parse_list(text: str, kind: type, what: str) -> list[Any]:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise OptionError(f"--{what} must be comma-separated numbers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise OptionError(f"--{what} must list numbers > 0, got {text!r}")
    return values


def _per_m(usd_per_hour: float, rate: float) -> float:
    return usd_per_hour / (rate * 3600) * 1e6


def _priced(preview: AppPreview, rate: float) -> dict[str, Any]:
    """A design's figures: $ per million frames in all and per item (the fleet and each service)."""
    summary = preview.all_in_summary()
    items = {"fleet": summary["fleet_per_million_frames"]}
    items.update({s: v["per_million_frames"] for s, v in summary["data_plane"].items()})
    return {
        "per_million_frames": round(summary["all_in_per_million_frames"], 4),
        "data_plane_per_million_frames": round(summary["data_plane_per_million_frames"], 4),
        "fleet_per_million_frames": round(summary["fleet_per_million_frames"], 4),
        "items": {k: round(v, 4) for k, v in items.items()},
        "instances": {hw: n for hw, n in preview.fleet.counts().items() if n},
        "batches": {name: sorted({g.batch for g in m.groups}) for name, m in preview.plan.modules.items()},
        "units_per_frame": summary["data_plane_units_per_frame"],
        "rate": rate,
    }


def _alb_per_hour(rate: float, frame_kb: float, prices: AwsPrices) -> float:
    """The ALB's hour and LCUs: processed bytes (1 GB/h per LCU) dominate with keep-alive clients."""
    gb_per_hour = rate * frame_kb * 1024 * 3600 / GB
    lcu = max(gb_per_hour, 0.0)
    return prices.require("elasticloadbalancing", "AlbHours").cost(1) + prices.require(
        "elasticloadbalancing", "LcuHours"
    ).cost(lcu)


def _triton(preview: AppPreview, rate: float, frame_kb: float, prices: AwsPrices) -> dict[str, Any]:
    """Low: every module's offered rate on its configuration of least $ per request (fractional machines,
    no headroom, no latency bound); high: the cheapest packed fleet among the floor plans (Triton batches
    dynamically, so any of them). Both plus the ALB."""
    scale = rate / preview.planned_rate
    low = 0.0
    for module in preview.floor_plans[0].problem.modules.values():
        best = min(
            preview.problem.hardware[e.hardware].price_per_hour / e.throughput
            for e in module.profile
            if e.hardware in preview.problem.hardware
        )
        low += module.rate * scale * best
    high = min(f.fleet.billed_per_hour for f in preview.floor_plans if f.fleet is not None)
    alb = _alb_per_hour(rate, frame_kb, prices)
    return {
        "per_million_frames": round(_per_m(high + alb, rate), 4),
        "low_per_million_frames": round(_per_m(low + alb, rate), 4),
        "items": {"fleet": round(_per_m(high, rate), 4), "alb": round(_per_m(alb, rate), 4)},
    }


def _sagemaker(preview: AppPreview, rate: float, frame_kb: float, prices: AwsPrices) -> dict[str, Any]:
    base = preview.floor_plans[0]
    assert base.plan is not None
    instances = 0.0
    missing: list[str] = []
    for module in base.plan.modules.values():
        for group in module.groups:
            instance_type = (base.problem.hardware[group.hardware].instance_type) or ""
            price = prices.price("sagemaker", f"ml.{instance_type}")
            if price is None:
                missing.append(group.hardware)
                continue
            instances += price.cost(group.machines)
    roots = {s for s, _, _ in preview.spec.edges} - {d for _, d, _ in preview.spec.edges} or set(
        base.plan.modules
    )
    children = sum(
        float((m.model_extra or {}).get("rate") or 0.0)
        for n, m in base.plan.modules.items()
        if n not in roots
    ) * (rate / preview.planned_rate)
    frame_b = frame_kb * 1024
    bytes_in = rate * len(roots) * frame_b + children * frame_b * TODAY.crop_fraction
    bytes_out = (rate + children) * TODAY.result_bytes_per_task
    data = prices.require("sagemaker", "DataProcessedGB").cost((bytes_in + bytes_out) * 3600 / GB)
    return {
        "per_million_frames": round(_per_m(instances + data, rate), 4),
        "items": {
            "instances": round(_per_m(instances, rate), 4),
            "data_processed": round(_per_m(data, rate), 4),
        },
        "unpriced_hardware": sorted(set(missing)),
    }


def tco(
    apps: list[str], rates: list[float], sizes: list[float], per_post: int, progress: Any = None
) -> list[dict[str, Any]]:
    """A row per (app, rate, frame size) with each design's $ per million frames, itemised."""
    store = LocalStore(PACKAGE_ROOT)
    prices = load_aws_prices()
    catalog = store.load_catalog()
    lookup = profile_lookup(store)
    push = TODAY.with_(name="today_push", result_sink="sqs")  # an app with "results": "push"
    rest = TODAY.with_(name="today_rest_waf", api="rest", waf=True)  # the option: REST API + WAF
    rows = []
    for app in apps:
        doc = store.load_app(app).model_dump(mode="json", exclude_none=True)
        for rate in rates:
            if progress:
                progress(f"{app} at {rate:g} frames/s")
            try:
                preview = preview_app(
                    doc,
                    rate,
                    catalog=catalog,
                    stored_profile=lookup,
                    config=ControlConfig(),
                    all_in=AllInSpec(TODAY, prices, sizes[0], per_post, fold=True),
                )
            except ControlError as exc:
                raise ScenarioError(f"{app} at {rate:g} frames/s: {str(exc).splitlines()[0]}") from exc
            for kb in sizes:
                designs = {
                    "today": _priced(reprice(preview, AllInSpec(TODAY, prices, kb, 1, fold=True)), rate),
                    **{
                        name: _priced(
                            reprice(preview, AllInSpec(policy, prices, kb, per_post, fold=True)), rate
                        )
                        for name, policy in (
                            ("today_batch", TODAY),
                            ("today_push", push),
                            ("today_rest_waf", rest),
                            ("per_task", PER_TASK),
                        )
                    },
                    "triton_alb": _triton(preview, rate, kb, prices),
                    "sagemaker": _sagemaker(preview, rate, kb, prices),
                }
                rows.append(
                    {"app": app, "rate": rate, "frame_kb": kb, "frames_per_post": per_post, **designs}
                )
    return rows


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue #25's targets for the traffic app, 8 KB frames, at each rate: the code at N frames per POST
    (results pulled, and pushed) all-in <= $1.50 per million frames and its data plane <= its fleet."""
    out = []
    for row in rows:
        if row["app"] != "traffic" or row["frame_kb"] != 8:  # noqa: PLR2004 -- the target's frame size
            continue
        for design in TARGET_DESIGNS:
            d = row[design]
            out.append(
                {
                    "rate": row["rate"],
                    "design": design,
                    "frames_per_post": row["frames_per_post"],
                    "all_in_per_million_frames": d["per_million_frames"],
                    "all_in_met": d["per_million_frames"] <= TARGET_USD_PER_M,
                    "data_plane_per_million_frames": d["data_plane_per_million_frames"],
                    "fleet_per_million_frames": d["fleet_per_million_frames"],
                    "data_plane_le_fleet": d["data_plane_per_million_frames"]
                    <= d["fleet_per_million_frames"],
                }
            )
    return out


def render(rows: list[dict[str, Any]], plots: list[str]) -> None:
    # CLI start-up: rich only when printing
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))
    table = Table(title="all-in $ per million frames (fleet + data plane; Triton low-high; docs/cost.md)")
    cols = ["app", "frames/s", "KB", "today 1/POST", "today N/POST"]
    cols += ["today push", "today REST+WAF", "per task N/POST"]
    cols += ["Triton+ALB", "SageMaker"]
    cols += ["N/POST fleet", "N/POST data plane", "batches (N/POST)"]  # batches in module order
    for col in cols:
        table.add_column(
            col,
            justify="left" if col in ("app", "batches (N/POST)") else "right",
            no_wrap=col == "batches (N/POST)",
        )
    for row in rows:
        b = row["today_batch"]
        t = row["triton_alb"]
        table.add_row(
            row["app"],
            f"{row['rate']:,.0f}",
            f"{row['frame_kb']:g}",
            f"{row['today']['per_million_frames']:.2f}",
            f"{b['per_million_frames']:.2f}",
            f"{row['today_push']['per_million_frames']:.2f}",
            f"{row['today_rest_waf']['per_million_frames']:.2f}",
            f"{row['per_task']['per_million_frames']:.2f}",
            f"{t['low_per_million_frames']:.2f}-{t['per_million_frames']:.2f}",
            f"{row['sagemaker']['per_million_frames']:.2f}",
            f"{b['fleet_per_million_frames']:.2f}",
            f"{b['data_plane_per_million_frames']:.2f}",
            " ".join("/".join(map(str, bs)) for bs in b["batches"].values()),
        )
    console.print(table)
    items = Table(
        title="itemised, $ per million frames: today (1 frame per POST), today_batch (N per POST, pull), "
        "today_push (N per POST, push) and per_task (N per POST, the unpacked wire)"
    )
    for col in ["app", "frames/s", "KB", "design", "fleet", *SERVICES]:
        items.add_column(col, justify="left" if col in ("app", "design") else "right")
    for row in rows:
        for design in ("today", "today_batch", "today_push", "per_task"):
            it = row[design]["items"]
            items.add_row(
                row["app"],
                f"{row['rate']:,.0f}",
                f"{row['frame_kb']:g}",
                design,
                *(f"{it[k]:.3f}" for k in ("fleet", *SERVICES)),
            )
    console.print(items)
    for t in targets(rows):
        met = "met" if t["all_in_met"] else "NOT met"
        under = "met" if t["data_plane_le_fleet"] else "NOT met"
        console.print(
            f"target, traffic, 8 KB, {t['frames_per_post']} per POST, {t['rate']:,.0f} frames/s, "
            f"{t['design']}: all-in ${t['all_in_per_million_frames']:.2f}/M "
            f"(<= {TARGET_USD_PER_M:.2f}: {met}); "
            f"data plane ${t['data_plane_per_million_frames']:.2f}/M vs fleet "
            f"${t['fleet_per_million_frames']:.2f}/M (data plane <= fleet: {under})"
        )
    prices = load_aws_prices()
    console.print(
        f"data-plane prices: {prices.label}, from memory, not re-checked (profiles/aws_prices.json, "
        "each entry dated); EC2: profiles/hardware.json. Triton low: offered rate on each module's "
        "cheapest configuration (fractional machines); high: the cheapest packed fleet of the plans. "
        "SageMaker: one endpoint per module on the fleet-only plan's machines at ml. prices + data "
        "processed. docs/cost.md"
    )
    for path in plots:
        console.print(f"plot: {path}")


_STACK = (
    ("fleet / instances", ("fleet", "instances")),
    ("API + WAF + Lambda", ("api_gateway", "waf", "lambda")),
    ("SQS", ("sqs",)),
    ("DynamoDB", ("dynamodb",)),
    ("S3", ("s3",)),
    ("logs, metrics, fixed, ALB, data", ("logs_metrics", "fixed", "alb", "data_processed")),
)


def plot(rows: list[dict[str, Any]], path: str) -> str:
    """A stacked bar per design and app, a panel per (rate, frame size)."""
    import matplotlib  # optional and slow to import: only when plots are asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display backend

    panels = sorted({(r["rate"], r["frame_kb"]) for r in rows})
    apps = list(dict.fromkeys(r["app"] for r in rows))
    designs = ("today", "today_batch", "today_push", "per_task", "triton_alb", "sagemaker")
    labels = {
        "today": "today 1",
        "today_batch": "today N",
        "today_push": "push N",
        "per_task": "per task N",
        "triton_alb": "Triton",
        "sagemaker": "SageMaker",
    }
    cols = 2
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(14, 4.5 * nrows), squeeze=False)
    colours = [plt.get_cmap("tab10")(i) for i in range(len(_STACK))]
    width = 0.13
    for ax, (rate, kb) in zip(axes.flat, panels, strict=False):
        by_app = {r["app"]: r for r in rows if r["rate"] == rate and r["frame_kb"] == kb}
        for d, design in enumerate(designs):
            xs = [i + (d - (len(designs) - 1) / 2) * width for i in range(len(apps))]
            bottom = [0.0] * len(apps)
            for s, (label, keys) in enumerate(_STACK):
                heights = [sum(by_app[a][design]["items"].get(k, 0.0) for k in keys) for a in apps]
                ax.bar(
                    xs, heights, width, bottom=bottom, color=colours[s], label=label if d == 0 else None,
                    edgecolor="white", linewidth=0.3,
                )  # fmt: skip
                bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
            for x, total in zip(xs, bottom, strict=True):
                ax.text(
                    x,
                    total,
                    f"{labels[design]} {total:.2f}",
                    rotation=90,
                    ha="center",
                    va="bottom",
                    fontsize=6,
                )
        ax.set_xticks(range(len(apps)), apps)
        ax.set_ylabel("$ per million frames")
        ax.margins(y=0.15)
        ax.set_title(f"{rate:,.0f} frames/s, {kb:g} KB frames")
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=len(_STACK), fontsize=8)
    fig.suptitle(
        "All-in cost per million frames: the data plane as the code is (1 and N frames per POST, results "
        "pulled or pushed), the unpacked wire, Triton+ALB, SageMaker"
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110)
    except OSError as exc:
        raise OptionError(f"cannot write the plot {path}: {exc}") from exc
    finally:
        plt.close(fig)
    return str(out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "The all-in cost (EC2 fleet + data plane) of every demo app, $ per million frames itemised by "
        "service, for the data plane as the code is (1 and N frames per POST; results pulled or pushed; "
        "the REST API + WAF option) and the unpacked wire, beside Triton on EC2 behind an ALB and "
        "SageMaker real-time endpoints (docs/cost.md). Pure arithmetic on the plans: nothing runs."
    )
    parser.add_argument(
        "--apps", default=",".join(APPS), help=f"apps, comma-separated (default {','.join(APPS)})"
    )
    parser.add_argument(
        "--rates", default="1000,50000", help="frames/s, comma-separated (default 1000,50000)"
    )
    parser.add_argument(
        "--frame-kb", default="8,60", help="frame sizes in KB, comma-separated (default 8,60)"
    )
    parser.add_argument(
        "--frames-per-post",
        type=int,
        default=10,
        help="frames per POST of every design but today's (a frame per POST), 1-10 (default 10)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--plot", metavar="PATH", default=None, help=f"the PNG bar chart (default <results dir>/{PLOT})"
    )
    parser.add_argument("--no-plot", action="store_true", help="write no PNG")
    add_results_arguments(parser)


def run_command(args: argparse.Namespace) -> int:
    apps = [a.strip() for a in args.apps.split(",") if a.strip()]
    unknown = sorted(set(apps) - set(LocalStore(PACKAGE_ROOT).list_apps()))
    if not apps or unknown:
        raise OptionError(f"--apps: unknown app(s) {', '.join(unknown) or '(none given)'}")
    rates = _parse_list(args.rates, float, "rates")
    sizes = _parse_list(args.frame_kb, float, "frame-kb")
    if not 1 <= args.frames_per_post <= 10:  # noqa: PLR2004 -- the front's batch form
        raise OptionError(f"--frames-per-post must be 1 to 10, got {args.frames_per_post}")
    path = args.plot or str(Path(args.results) / PLOT)

    def body(page: Recording) -> int:
        try:
            rows = tco(apps, rates, sizes, args.frames_per_post)
        except ProfilesError as exc:
            raise ScenarioError(f"cannot load the demo applications: {exc}") from exc
        plots = [] if args.no_plot else [plot(rows, path)]
        page.plots.extend(plots)
        if args.json:
            print(json.dumps({"rows": rows, "targets": targets(rows), "plots": plots}, indent=2))
        else:
            render(rows, plots)
        return 0

    return record("tco", args, body)
