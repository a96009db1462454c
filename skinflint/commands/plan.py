"""`skinflint plan`: a problem file planned by the planner, or an app planned at a frame rate through
the control loop's own code path (``skinflint plan APP --rate R``), shown as a table or JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skinflint.errors import UsageError

if TYPE_CHECKING:
    import argparse

    from control.preview import AppPreview

PROFILE_SOURCES = ("packaged", "store")  # the profiles committed with the code; + this host's builds
DATA_PLANE_POLICIES = ("today", "per_task")  # profiles/allin.py POLICIES
DATA_PLANE_DEFAULT = "today"  # the design as the code is
DEFAULT_FRAMES_PER_POST = {"today": 10, "per_task": 10}  # clients POST batches (the demo, locust)
DEFAULT_FRAME_KB = 8.0
ALL_IN = "all-in"


def register(sub: Any) -> None:
    # CLI start-up: loaded when this command runs
    from planner.policies import POLICIES

    p = sub.add_parser(
        "plan",
        help="plan a problem file, or an app at a frame rate as the control loop would",
        description=(
            "Plan a problem file (docs/design.md §3 format) and show the plan; or, with --rate, plan an "
            "app (a demo app name such as traffic, or a registration spec file, YAML or JSON) at that "
            "many frames/s exactly as the control loop's first epoch would (forecast headroom, the "
            "dispatch-aware solve, packing onto whole instances) and show the packed fleet, its $/h "
            "and each module's configuration and latency budget. Nothing needs to be running."
        ),
    )
    p.add_argument("problem", metavar="TARGET", help="problem JSON file, demo app name or app spec file")
    p.add_argument(
        "--rate", type=float, default=None, help="frames/s to plan the app for (TARGET is then an app)"
    )
    p.add_argument(
        "--profiles",
        choices=PROFILE_SOURCES,
        default="packaged",
        help="with --rate: the profiles committed with the code (default, what a deployment plans "
        "with) or the store (this host's `skinflint models build` cache over them)",
    )
    p.add_argument(
        "--policy",
        default=None,
        metavar="NAME",
        help="for a problem file: the planning policy (default skinflint; "
        f"{', '.join(POLICIES)}); with --rate: the data plane's design priced in the all-in bill, "
        f"{' or '.join(DATA_PLANE_POLICIES)} (default {DATA_PLANE_DEFAULT}; docs/cost.md)",
    )
    p.add_argument(
        "--objective",
        default="billed",
        choices=["occupancy", "billed", ALL_IN],
        help="cost the plan minimises (default billed: the EC2 fleet); with --rate, all-in: the fleet "
        "plus the data plane's per-batch requests (docs/cost.md)",
    )
    p.add_argument(
        "--frame-kb",
        type=float,
        default=DEFAULT_FRAME_KB,
        metavar="KB",
        help=f"with --rate: a frame's size in KB, for the data plane's bill (default {DEFAULT_FRAME_KB:g})",
    )
    p.add_argument(
        "--frames-per-post",
        type=int,
        default=None,
        metavar="N",
        help="with --rate: frames per POST, 1-10 (default 10: the clients post JSON batches)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.rate is not None:
        return run_app(args)
    if args.objective == ALL_IN:
        raise UsageError("--objective all-in prices the data plane at a frame rate: add --rate FRAMES_PER_S")
    args.policy = args.policy or "skinflint"
    path = Path(args.problem)
    if not path.is_file() or _looks_like_app(path):
        raise UsageError(
            f"{args.problem}: an app (a demo app name or a spec file) is planned at a frame rate: "
            "add --rate FRAMES_PER_S (a problem file needs no rate)"
        )
    return run_problem(args)


def _looks_like_app(path: Path) -> bool:
    """A spec file (modules name models) rather than a problem file (modules carry profiles)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return path.suffix in (".yaml", ".yml")
    modules = doc.get("modules") if isinstance(doc, dict) else None
    if not isinstance(modules, dict) or not modules:
        return False
    return all(isinstance(m, dict) and "profile" not in m for m in modules.values())


def run_problem(args: argparse.Namespace) -> int:
    # CLI start-up: loaded when this command runs
    from planner.cli import load_problem
    from planner.errors import InfeasibleError, PlannerError
    from planner.solve import solve

    try:
        problem = load_problem(args.problem)
        plan = solve(problem, policy=args.policy, objective=args.objective)
    except InfeasibleError as exc:
        raise UsageError(str(exc), exit_code=2) from None
    except PlannerError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(plan.model_dump(mode="json"), indent=2))
        return 0
    render(plan)
    return 0


def render(plan: Any) -> None:
    # CLI start-up: loaded when this command runs
    from rich.console import Console
    from rich.table import Table

    extra = plan.model_extra or {}
    table = Table(
        title=f"{extra.get('name', 'plan')} — policy {extra.get('policy')}, objective {plan.objective}, "
        f"SLO {extra.get('slo_s')} s"
    )
    for col in [
        "module",
        "rate",
        "dummy",
        "group (TC order)",
        "machines",
        "req/s each",
        "wcl s",
        "budget s",
        "occupancy $/h",
        "billed $/h",
    ]:
        table.add_column(col, justify="left" if col in ("module", "group (TC order)") else "right")
    for name, m in plan.modules.items():
        me = m.model_extra or {}
        for k, g in enumerate(m.groups):
            first = k == 0
            table.add_row(
                name if first else "",
                f"{me.get('rate', 0):.1f}" if first else "",
                f"{m.dummy_rate:.1f}" if first else "",
                f"{g.hardware} b{g.batch} c{g.concurrency} d={g.duration_s * 1000:.1f}ms",
                str(g.machines),
                f"{g.rate_per_machine:.1f}",
                f"{m.worst_case_latency_s:.4f}" if first else "",
                f"{m.latency_budget_s:.4f}" if first else "",
                f"{me.get('occupancy_per_hour', 0):.3f}" if first else "",
                f"{me.get('billed_per_hour', 0):.3f}" if first else "",
            )
    console = Console(width=max(Console().width, 130))
    console.print(table)
    for p in extra.get("paths", []):
        console.print(f"path {' -> '.join(p['modules'])}: worst case {p['worst_case_latency_s']:.4f} s")
    proof = "proven optimal" if extra.get("proven_optimal") else "heuristic"
    console.print(
        f"occupancy cost ${plan.cost_per_hour:.3f}/h, billed ${plan.billed_per_hour:.3f}/h "
        f"({proof}; solved in {plan.solve_ms:.2f} ms)"
    )


def run_app(args: argparse.Namespace) -> int:
    # CLI start-up: loaded when this command runs
    from control.config import ControlConfig
    from control.errors import ControlError
    from control.preview import preview_app
    from control.spec import parse_spec_text, profile_lookup
    from profiles.allin import AllInError
    from profiles.errors import ProfilesError
    from profiles.store import PACKAGE_ROOT, LocalStore, default_store

    if not math.isfinite(args.rate) or args.rate <= 0:
        raise UsageError(f"--rate must be a number of frames/s > 0, got {args.rate:g}")
    if args.objective == "occupancy":
        raise UsageError("an app is planned billed (the fleet) or all-in: --objective billed or all-in")
    store = LocalStore(PACKAGE_ROOT) if args.profiles == "packaged" else default_store()
    try:
        all_in = _all_in(args)
        config = ControlConfig.from_env()  # the planner's settings (SKINFLINT_*), as the planner reads them
        doc = _app_doc(args.problem, store, parse_spec_text)
        preview = preview_app(
            doc,
            args.rate,
            catalog=store.load_catalog(),
            stored_profile=profile_lookup(store),
            config=config,
            all_in=all_in,
        )
    except (ControlError, ProfilesError, AllInError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    summary = preview.summary()
    summary["profiles"] = {"source": args.profiles, "store": store.describe(), **_provenance(preview)}
    children = {child for _, child in preview.problem.edges}
    summary.update(_deployment(summary, roots=sum(m not in children for m in preview.problem.modules)))
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    render_app(preview, summary)
    return 0


def _all_in(args: argparse.Namespace) -> Any:
    """The data plane to price (:class:`control.preview.AllInSpec`) from --policy, --frame-kb,
    --frames-per-post and --objective; a bad value is one line (:class:`profiles.allin.AllInError`)."""
    # CLI start-up: loaded when this command runs
    from control.preview import AllInSpec
    from profiles.allin import AllInError, policy_named
    from profiles.aws_prices import load_aws_prices

    name = args.policy or DATA_PLANE_DEFAULT
    if name not in DATA_PLANE_POLICIES:
        raise AllInError(
            f"--policy {name}: with --rate the policy is the data plane's design, "
            f"one of {', '.join(DATA_PLANE_POLICIES)}"
        )
    if not (math.isfinite(args.frame_kb) and args.frame_kb > 0):
        raise AllInError(f"--frame-kb must be a number of KB > 0, got {args.frame_kb:g}")
    per_post = args.frames_per_post if args.frames_per_post is not None else DEFAULT_FRAMES_PER_POST[name]
    if not 1 <= per_post <= 10:  # noqa: PLR2004 -- the front's JSON batch form: 1-10 frames
        raise AllInError(f"--frames-per-post must be 1 to 10 (the front's batch form), got {per_post}")
    return AllInSpec(
        policy=policy_named(name),
        prices=load_aws_prices(),
        frame_kb=float(args.frame_kb),
        frames_per_post=per_post,
        fold=args.objective == ALL_IN,
    )


def _deployment(summary: dict[str, Any], roots: int) -> dict[str, Any]:
    """The ``-c`` values a deployment for this peak needs (``cdk_context``, cdk/limits.py), the
    vCPUs each EC2 quota must allow for it (``quota_vcpus``, Service Quotas code -> vCPUs) and the
    DynamoDB units per second its tables need (``table_units_per_s``; ``roots``: the app's root
    modules, each a shared slot-count write per frame)."""
    # CLI start-up: loaded when this command runs
    from cdk.config import load_catalog
    from cdk.limits import deployment_context, table_units, vcpu_needs

    instances = summary["instances"]
    context = deployment_context(summary["frame_rate"], instances)
    return {
        "cdk_context": context,
        "quota_vcpus": vcpu_needs(instances, load_catalog()),
        "table_units_per_s": table_units(
            summary["frame_rate"],
            summary["data_plane_units_per_frame"],
            instances,
            int(context["front_concurrency"]),
            roots=roots,
        ),
    }


def _app_doc(target: str, store: Any, parse_spec_text: Any) -> dict[str, Any]:
    """The registration spec of ``target``: a spec file (YAML or JSON) or a demo app's name."""
    # CLI start-up: loaded when this command runs
    from control.errors import RegistrationError

    path = Path(target)
    if path.is_file():
        try:
            text = path.read_text()
        except OSError as exc:
            raise UsageError(f"cannot read {target}: {exc.strerror or exc}") from None
        doc = parse_spec_text(text, target)
        if not isinstance(doc, dict):
            raise RegistrationError([f"{target}: the spec must be a mapping (a YAML or JSON object)"])
        return doc
    if "/" in target or target.endswith((".json", ".yaml", ".yml")):
        raise UsageError(f"{target}: no such file")
    app = store.load_app(target)  # a demo app: its spec, without a rate (--rate gives it)
    spec: dict[str, Any] = app.model_dump(mode="json", exclude_none=True)
    return spec


def _provenance(preview: AppPreview) -> dict[str, Any]:
    """Where each module's profile entries come from (``measured``, ``derived`` ...), per hardware."""
    out: dict[str, dict[str, str]] = {}
    for name, module in preview.problem.modules.items():
        sources: dict[str, set[str]] = {}
        for entry in module.profile:
            source = str((entry.model_extra or {}).get("source", "unknown"))
            sources.setdefault(entry.hardware, set()).add(source)
        out[name] = {hw: "+".join(sorted(kinds)) for hw, kinds in sorted(sources.items())}
    return {"modules": out}


def render_app(preview: AppPreview, summary: dict[str, Any]) -> None:
    # CLI start-up: loaded when this command runs
    from rich.console import Console
    from rich.table import Table

    settings = summary["settings"]
    console = Console(width=max(Console().width, 130))
    console.print(
        f"[bold]{summary['app']}[/] at {summary['frame_rate']:g} frames/s, planned for "
        f"{summary['planned_rate']:.4g} (headroom {settings['headroom']:g}), SLO {summary['slo_s']:g} s; "
        f"hop {settings['hop_overhead_s']:g} s + batch {settings['batch_overhead_s']:g} s (latency only), "
        f"policy {settings['policy']}; "
        f"profiles: {summary['profiles']['source']}"
    )
    table = Table(title="modules (the control loop's dispatch-aware plan)")
    for col in ["module", "configuration", "machines", "req/s each", "worst case s", "budget s", "profile"]:
        table.add_column(col, justify="left" if col in ("module", "configuration", "profile") else "right")
    provenance = summary["profiles"]["modules"]
    for name, module in summary["modules"].items():
        for index, group in enumerate(module["groups"]):
            first = index == 0
            table.add_row(
                name if first else "",
                f"{group['hardware']} b{group['batch']} c{group['concurrency']} "
                f"d={group['duration_s'] * 1000:.1f}ms",
                str(group["machines"]),
                f"{group['rate_per_machine']:.1f}",
                f"{module['worst_case_latency_s']:.4f}" if first else "",
                f"{module['latency_budget_s']:.4f}" if first else "",
                provenance.get(name, {}).get(group["hardware"], ""),
            )
    console.print(table)
    fleet = Table(title="packed fleet (whole instances)")
    for col in ["hardware", "instances", "$/h each", "$/h"]:
        fleet.add_column(col, justify="left" if col == "hardware" else "right")
    for hw, count in summary["instances"].items():
        if count:
            price = summary["prices"][hw]
            fleet.add_row(hw, str(count), f"{price:.3f}", f"{price * count:.3f}")
    console.print(fleet)
    console.print(
        f"fleet ${summary['fleet_per_hour']:.3f}/h "
        f"(the plans' occupancy ${summary['occupancy_per_hour']:.3f}/h)"
    )
    context = " ".join(f"-c {key}={value}" for key, value in summary["cdk_context"].items())
    console.print(f"deploy for this peak (cdk/limits.py): {context}", soft_wrap=True)
    quotas = ", ".join(f"{code} >= {vcpus} vCPUs" for code, vcpus in summary["quota_vcpus"].items())
    console.print(f"EC2 On-Demand quotas at those maxima: {quotas or 'none'}")
    units = summary["table_units_per_s"]
    over = ", ".join(units["over_table_defaults"]) or "none"
    console.print(
        f"DynamoDB at this peak (units/s): results {units['results']['read']:,} read, "
        f"{units['results']['write']:,} write; config {units['config']['read']:,} read, "
        f"{units['config']['write']:,} write; over the 40,000 per-table defaults: {over}",
        soft_wrap=True,
    )
    dates = sorted({str(price["date"]) for price in summary["price_sources"].values() if price["date"]})
    console.print(f"fleet prices from profiles/hardware.json ({', '.join(dates) or 'undated'})")
    if "data_plane" in summary:
        render_all_in(console, summary)


def render_all_in(console: Any, summary: dict[str, Any]) -> None:
    """The data plane itemised by service, and fleet / data plane / all-in $/h and $ per million frames."""
    # CLI start-up: loaded when this command runs
    from rich.table import Table

    console.print(
        f"[bold]all-in bill[/]: data plane '{summary['data_plane_policy']}', {summary['frame_kb']:g} KB "
        f"frames, {summary['frames_per_post']} per POST, at {summary['frame_rate']:g} frames/s"
    )
    table = Table()
    for col in ["item", "$/h", "$ per million frames"]:
        table.add_column(col, justify="left" if col == "item" else "right")
    table.add_row(
        "EC2 fleet", f"{summary['fleet_per_hour']:.3f}", f"{summary['fleet_per_million_frames']:.3f}"
    )
    for service, usd in summary["data_plane"].items():
        table.add_row(f"  {service}", f"{usd['per_hour']:.3f}", f"{usd['per_million_frames']:.3f}")
    table.add_row(
        "data plane",
        f"{summary['data_plane_per_hour']:.3f}",
        f"{summary['data_plane_per_million_frames']:.3f}",
    )
    table.add_row(
        "[bold]all-in[/]", f"{summary['all_in_per_hour']:.3f}", f"{summary['all_in_per_million_frames']:.3f}"
    )
    console.print(table)
    units = summary["data_plane_units_per_frame"]
    console.print(
        "billing units per frame: " + ", ".join(f"{k.replace('_', ' ')} {v:.3g}" for k, v in units.items())
    )
    tried = [row for row in summary["batch_floor_candidates"] if row["planned"]]
    if tried:
        console.print(
            "batch floors tried (fleet + data plane = all-in $/h): "
            + "; ".join(
                f">= {row['min_batch']}: {row['fleet_per_hour']:.3f} + {row['data_plane_per_hour']:.3f} = "
                f"{row['all_in_per_hour']:.3f}{' (chosen)' if row['chosen'] else ''}"
                for row in tried
            )
        )
    objective = "fleet + data plane (all-in)" if summary["objective_all_in"] else "the fleet only"
    console.print(
        f"the plan minimises {objective}; data-plane prices: {summary['data_plane_prices']['label']} "
        "(from memory, not re-checked: profiles/aws_prices.json); docs/cost.md"
    )
