"""``skinflint status``: the plan in force and the fleet.

Shows the current plan version (and the one the front serves while a new one is activating), per
app the planned frame rate against the rate observed over the last ``--window`` seconds
(CloudWatch ``FramesAccepted``), what each module's planned figures rest on (its profile source per
hardware class: measured on instance, measured, derived) and the admission reserve the control loop
chose again for its ``shed_target`` (control/reserves.py), if it did, its plan's proven optimality gap
(column ``gap``, ``proven_gap`` in JSON: (cost - the solver's certified lower bound) / cost; 0 when proven
optimal; a quick plan has one too; unknown for a plan held at new rates), instances per hardware
type (planned, the Auto Scaling group's desired and in-service counts, instances heartbeating), the billed and
occupancy cost per hour, and the last epoch's outcome. ``--json`` for programs; ``--endpoint`` for a
local stack.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

from skinflint.commands.apps import add_endpoint, aws_errors, data_config

if TYPE_CHECKING:
    import argparse

    from core.settings import DataPlaneConfig


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "status", help="the plan in force: version, rates, instances, cost", description=__doc__
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--window", type=float, default=60.0, help="seconds of traffic the observed rate covers (default 60)"
    )
    add_endpoint(parser)
    parser.set_defaults(func=run)


def _asg_names(state_names: dict[str, str]) -> dict[str, str]:
    env = os.environ.get("SKINFLINT_ASG_NAMES")
    return dict(json.loads(env)) if env else dict(state_names)


def collect(cfg: DataPlaneConfig, window_s: float, now: float | None = None) -> dict[str, Any]:
    """The status document (what ``--json`` prints)."""
    # CLI start-up: loaded when this command runs
    from control.epoch import ControlConfig
    from control.state import StateStore
    from core.adapters.autoscaling import FleetGroups
    from core.adapters.config_items import ConfigItems
    from core.adapters.plan_store import PlanStore
    from core.adapters.rates import ObservedRates, RateWindow
    from core.clients import make_client

    now = time.time() if now is None else now
    ddb = make_client("dynamodb", cfg)
    plans = PlanStore(ddb, cfg.config_table)
    state = StateStore(ConfigItems(ddb, cfg.config_table)).load()
    cur = plans.current()
    out: dict[str, Any] = {"at": now, "version": None, "apps": {}, "hardware": {}, "last_epoch": state.last}
    if cur is None:
        return out
    fleet = plans.fleet(cur.version)
    serving = cur.serving(now)
    period = int(max(1, min(60, window_s)))
    observed = ObservedRates(make_client("cloudwatch", cfg), cfg.metrics_namespace).frame_rates(
        cur.apps, RateWindow(now, window_s, period, ControlConfig.from_env().rate_lag_s)
    )
    out.update(
        version=cur.version,
        serving=serving,
        activate_at=cur.activate_at,
        created_at=cur.created_at,
        reason=cur.reason,
        billed_per_hour=round(cur.billed_per_hour, 4),
        occupancy_per_hour=round(cur.occupancy_per_hour, 4),
        dedicated_per_hour=round(fleet.dedicated_per_hour, 4) if fleet else None,
        apps={
            app: {"planned": round(entry.frame_rate, 3), "observed": round(observed.get(app, 0.0), 3)}
            for app, entry in sorted(cur.apps.items())
        },
    )
    for app, entry in cur.apps.items():  # what the plan's figures rest on (control/epoch.py, #27)
        gap = (entry.model_extra or {}).get("proven_gap")  # the solver's proven gap (#29)
        out["apps"][app]["proven_gap"] = None if gap is None else round(float(gap), 6)
        sources = (entry.model_extra or {}).get("profile_sources")
        if sources:
            out["apps"][app]["profile_sources"] = sources
    if (cur.model_extra or {}).get("derived_margin") is not None:
        out["derived_margin"] = cur.model_extra["derived_margin"]  # type: ignore[index]
    for app, choice in state.reserves.items():  # reserves the control loop chose again (reserves.py)
        if app in out["apps"]:
            out["apps"][app]["reserve"] = choice.model_dump(include={"reserve", "rate", "shed", "met"})
    names = _asg_names(state.asg_names)
    groups = FleetGroups(make_client("autoscaling", cfg), names).states() if names else {}
    beats = [beat for beat in plans.instances().values() if beat.at >= now - 180 and beat.state != "gone"]
    for hw in sorted(set(cur.counts) | set(groups)):
        group = groups.get(hw)
        out["hardware"][hw] = {
            "planned": cur.counts.get(hw, 0),
            "desired": group.desired if group else None,
            "in_service": group.in_service if group else None,
            "heartbeating": sum(beat.hardware == hw for beat in beats),
        }
    return out


def run(args: argparse.Namespace) -> int:
    cfg = data_config(args.endpoint)
    with aws_errors("cannot read the status"):
        doc = collect(cfg, args.window)
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    render(doc)
    return 0


def _age(now: float, at: float) -> str:
    age_s = now - at
    return f"in {-age_s:.0f} s" if age_s < 0 else f"{age_s:.0f} s ago"


def render(doc: dict[str, Any]) -> None:
    # CLI start-up: loaded when this command runs
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if doc["version"] is None:
        console.print("no plan yet: register an app (skinflint apps register APP.yaml) and let an epoch run")
        _last(console, doc)
        return
    now = doc["at"]
    switching = f", serving v{doc['serving']} until it activates" if doc["serving"] != doc["version"] else ""
    console.print(
        f"plan version {doc['version']} (written {_age(now, doc['created_at'])}, active "
        f"{_age(now, doc['activate_at'])}{switching}): {doc['reason']}"
    )
    # no outer border: a reserve's line fits 80 columns beside the gap
    apps = Table(title="apps (frames/s)", show_edge=False, pad_edge=False)
    reserves = any("reserve" in figures for figures in doc["apps"].values())
    cols = ("app", "planned", "observed", "gap", *(["admission reserve (chosen again)"] if reserves else []))
    for col in cols:
        apps.add_column(col, justify="left" if col == "app" else "right")
    for app, figures in doc["apps"].items():
        row = [
            app,
            f"{figures['planned']:.2f}",
            f"{figures['observed']:.2f}",
            gap_text(figures.get("proven_gap")),
        ]
        if reserves:
            reserve = figures.get("reserve")
            row.append(
                f"{reserve['reserve']:g} at {reserve['rate']:.4g}/s, sheds {reserve['shed']:.2%}"
                + ("" if reserve["met"] else " (shed_target unmet)")
                if reserve
                else "-"
            )
        apps.add_row(*row)
    console.print(apps)
    _sources(console, doc)
    hw = Table(title="instances")
    for col in ("hardware", "planned", "group desired", "in service", "heartbeating"):
        hw.add_column(col, justify="left" if col == "hardware" else "right")
    for name, figures in doc["hardware"].items():
        hw.add_row(
            name,
            *(
                str(figures[column]) if figures[column] is not None else "-"
                for column in ("planned", "desired", "in_service", "heartbeating")
            ),
        )
    console.print(hw)
    console.print(
        f"EC2 fleet cost: billed ${doc['billed_per_hour']:.3f}/h, "
        f"occupancy ${doc['occupancy_per_hour']:.3f}/h"
        + (
            f", one instance per machine ${doc['dedicated_per_hour']:.3f}/h"
            if doc.get("dedicated_per_hour")
            else ""
        )
        + " (the fleet only: the data plane's requests are priced all-in by `skinflint report`)"
    )
    _last(console, doc)


def gap_text(gap: float | None) -> str:
    """A proven gap as the table shows it: a percentage, "0 %" when proven optimal, "n/a" when unknown."""
    if gap is None:
        return "n/a"
    if gap <= 0:
        return "0 %"
    return f"{gap * 100:.2g} %" if gap < 0.1 else f"{gap * 100:.0f} %"


def _sources(console: Any, doc: dict[str, Any]) -> None:
    """Per app and module: the profile source of each hardware class its plan uses."""
    from rich.table import Table  # CLI start-up: as in render

    rows = [
        (app, module, hw, source)
        for app, figures in doc["apps"].items()
        for module, per_hw in (figures.get("profile_sources") or {}).items()
        for hw, source in per_hw.items()
    ]
    if not rows:
        return
    margin = doc.get("derived_margin")
    note = f" (derived figures planned x{1 + margin:g})" if margin else ""
    table = Table(title=f"profile sources{note}")
    for col in ("app", "module", "hardware", "source"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _last(console: Any, doc: dict[str, Any]) -> None:
    last = doc.get("last_epoch") or {}
    if not last:
        return
    bits = [
        f"last epoch {last.get('epoch')}: {last.get('status')} {_age(doc['at'], last.get('at', doc['at']))}"
    ]
    if last.get("error"):
        bits.append(f"error {last['error']}")
    if last.get("failed_apps"):
        bits.append("failed apps " + ", ".join(f"{app} ({why})" for app, why in last["failed_apps"].items()))
    if last.get("excluded_hardware"):  # unavailable: a failed launch (a quota), no group, MaxSize 0
        bits.append(
            "unavailable (left out): "
            + ", ".join(f"{hw} ({why})" for hw, why in last["excluded_hardware"].items())
        )
    if last.get("limited_hardware"):  # at the group's MaxSize: planned with no more than it has
        bits.append(
            "no new capacity: " + ", ".join(f"{hw} ({why})" for hw, why in last["limited_hardware"].items())
        )
    if last.get("carried"):  # plans kept over a problem change (new prices), or quick: to be solved again
        bits.append(f"{len(last['carried'])} app(s) on a carried plan: " + ", ".join(last["carried"]))
    if last.get("quick"):
        bits.append(f"{len(last['quick'])} of them on a quick plan (too many new apps for one epoch)")
    if last.get("resolved"):
        bits.append(f"{len(last['resolved'])} carried plan(s) solved again")
    console.print("; ".join(bits))
