"""``skinflint loadtest``: run the locust load test (``loadtest/locustfile.py``, headless, in a
subprocess) against the local stack -- started for you, as ``skinflint demo`` does -- or a deployed
API (``--target URL --api-key K``), its cameras posting their frames in JSON batches
(``--frames-per-post``), then print RPS, failures, end-to-end latency percentiles, SLO
attainment, lost frames and the paths of locust's CSV and HTML reports. ``--report`` adds the cost
report of the run (CloudWatch: the local stack's moto, or your account). Exit status 1 when a frame
was lost or an answer was an error other than deliberate shedding (429/503)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skinflint.commands.report import parse_duration
from skinflint.errors import UsageError

if TYPE_CHECKING:
    import argparse

LOCUSTFILE = Path(__file__).resolve().parents[2] / "loadtest" / "locustfile.py"
USER_CLASSES = {
    "traffic": "TrafficUser",
    "face": "FaceUser",
    "pose": "PoseUser",
    "caption": "CaptionUser",
    "actdet": "ActdetUser",
}
DEFAULT_DURATION_S = 60.0
METRICS_FLUSH_S = 6.0  # the workers flush metrics every 5 s (the front after every request)


def register(sub: Any) -> None:
    # CLI start-up: loaded when this command runs
    from loadtest.rates import SHAPES

    parser = sub.add_parser(
        "loadtest", help="load-test the local stack or a deployed API (locust)", description=__doc__
    )
    parser.add_argument(
        "--shape", choices=sorted(SHAPES), default="steady", help="load shape (default steady)"
    )
    parser.add_argument(
        "--duration",
        type=parse_duration,
        default=DEFAULT_DURATION_S,
        help=f"length of the run: 90, 90s, 5m (default {DEFAULT_DURATION_S:g} s)",
    )
    parser.add_argument(
        "--app",
        action="append",
        dest="apps",
        metavar="APP",
        choices=sorted(USER_CLASSES),
        help="app to load (repeatable; default: traffic locally, every deployed app with --target)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=None,
        help="frames/s offered per app at the peak (default: the planned rate)",
    )
    parser.add_argument(
        "--plan-rate",
        type=float,
        default=None,
        help="local stack: frames/s the plan is made for (default: --rate, else 4); "
        "--rate 8 --plan-rate 4 offers twice the planned rate",
    )
    parser.add_argument(
        "--frames-per-post",
        type=int,
        default=None,
        metavar="N",
        help='frames per POST, 1-10, sent as the JSON batch form {"frames": [...]}: a camera at f '
        "frames/s posts its last N frames every N/f s (default, per app: the frames of half the "
        "app's SLO at the camera's rate, f x SLO / 2, within 1-10, as skinflint demo; 1 sends each "
        "frame as its own image/jpeg POST). A POST larger than the app's plan can ever take (503 "
        "batch_too_large) is split into POSTs of the max_frames the front names, and so are the rest",
    )
    parser.add_argument(
        "--phases",
        choices=["random", "even"],
        default="random",
        help="cameras' phases: independent (random, default) or spread evenly (one steady stream)",
    )
    parser.add_argument(
        "--collect",
        choices=["during", "after"],
        default=None,
        help="read each frame's result during the run (default with --target) or after it (default "
        "locally: moto scans the whole results table on every read, which slows the stack under test)",
    )
    parser.add_argument(
        "--slo", type=float, default=None, help="local stack: SLO in seconds (default: the app's)"
    )
    parser.add_argument(
        "--epoch",
        type=float,
        default=None,
        help="local stack: seconds between planning epochs (default that of skinflint up; "
        "3600 holds the first plan for the run)",
    )
    parser.add_argument(
        "--retention",
        type=parse_duration,
        default=None,
        help="local stack: how long it keeps a frame's results and the metric data points "
        "(default: the run plus 1h; at least the run plus 10 min)",
    )
    parser.add_argument(
        "--target", default=None, help="URL of a deployed API (default: start the local stack)"
    )
    parser.add_argument("--api-key", default=None, help="API key of --target (or SKINFLINT_API_KEY)")
    parser.add_argument(
        "--drain",
        type=float,
        default=10.0,
        help="seconds after the run to collect the last results (default 10)",
    )
    parser.add_argument("--out", default=None, help="directory for the reports (default loadtest-out/<time>)")
    parser.add_argument(
        "--report", action="store_true", help="also print the cost report of the run (CloudWatch)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--log-dir", default=None, help="local stack: where the processes' logs go")
    parser.set_defaults(func=run)


# -- running locust ----------------------------------------------------------------------------------


def _progress_rps(history: Path) -> str:
    """Current requests/s from locust's stats history (last aggregated row)."""
    try:
        lines = history.read_text().splitlines()
    except OSError:
        return ""
    if len(lines) < 2:
        return ""
    head = lines[0].split(",")
    last = lines[-1].split(",")
    try:
        users = last[head.index("User Count")]
        rps = float(last[head.index("Requests/s")])
        fails = float(last[head.index("Failures/s")])
    except (ValueError, IndexError):
        return ""
    return f"{users} users, {rps:.1f} req/s, {fails:.1f} failed/s"


def run_locust(
    url: str,
    api_key: str,
    apps: list[str],
    plan: Any,
    out: Path,
    quiet: bool,
    phases: str = "random",
    collect: str = "during",
) -> tuple[int, dict[str, Path]]:
    """Run locust headless against ``url``; returns (exit code, report paths)."""
    # CLI start-up: loaded when this command runs
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from workers.lifeline import child_env, module_argv

    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "outcomes": out / "outcomes.jsonl",
        "stats_csv": out / "locust_stats.csv",
        "history_csv": out / "locust_stats_history.csv",
        "failures_csv": out / "locust_failures.csv",
        "html": out / "locust_report.html",
        "log": out / "locust.log",
    }
    # locust in its own session (a Ctrl-C reaches this command, which stops it with SIGINT), under
    # the parent-death guard: if this process dies, locust gets SIGTERM and writes its reports
    env = child_env({**os.environ, **plan.to_env()})
    env.update(SKINFLINT_API_KEY=api_key, SKINFLINT_PHASES=phases)
    env["SKINFLINT_COLLECT"] = collect
    env["SKINFLINT_LOADTEST_OUT"] = str(paths["outcomes"])
    argv = module_argv("locust", [
        "-f", str(LOCUSTFILE), "--headless", "--host", url,
        "--csv", str(out / "locust"), "--html", str(paths["html"]), "--only-summary",
        "--exit-code-on-error", "0", "--loglevel", "WARNING", "--logfile", str(paths["log"]),
        *(USER_CLASSES[app] for app in apps),
    ])  # fmt: skip
    console = Console(stderr=True)
    total = plan.duration_s + plan.drain_s
    with (
        (out / "locust.stdout").open("wb") as sink,
        Progress(
            TextColumn(f"[bold]{plan.shape} load"),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[note]}"),
            console=console,
            transient=True,
            disable=quiet or not console.is_terminal,
        ) as prog,
    ):
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        task = prog.add_task("run", total=total, note="")
        start = time.time()
        try:
            while proc.poll() is None:
                prog.update(
                    task, completed=min(total, time.time() - start), note=_progress_rps(paths["history_csv"])
                )
                time.sleep(0.5)
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)  # locust writes its reports on SIGINT
            proc.wait(timeout=30)
            raise
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    return proc.returncode, paths


# -- output ------------------------------------------------------------------------------------------


def _pct(fraction: float | None) -> str:
    return (
        "-"
        if fraction is None or (isinstance(fraction, float) and math.isnan(fraction))
        else f"{fraction:.2%}"
    )


def _ms(value: float | None, scale: float = 1e3) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else f"{value * scale:.0f} ms"
    )


def print_tables(summary: dict[str, Any]) -> None:
    # CLI start-up: loaded when this command runs
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if Console().is_terminal else 150)
    table = Table(
        title=f"skinflint loadtest: {summary['shape']} {summary['rate']:g} frames/s per app "
        f"({summary['phases']} phases, {summary['frames_per_post']} frames per POST) "
        f"for {summary['duration_s']:g} s against {summary['target']}"
    )
    cols = ["app", "offered", "POSTs", "RPS", "accepted", "shed", "errors", "answered", "dropped", "lost",
            "SLO (accepted)", "SLO (answered)", "e2e p50 / p95 / p99", "e2e max",
            "POST p50 / p99"]  # fmt: skip
    for column in cols:
        table.add_column(column)
    rows = (
        [*summary["apps"].items(), ("all", summary["total"])]
        if len(summary["apps"]) > 1
        else list(summary["apps"].items())
    )
    for name, figures in rows:
        table.add_row(
            name,
            str(figures["offered"]),
            str(figures["posts"]),
            f"{figures['rps']:.2f}",
            str(figures["accepted"]),
            str(figures["shed"]),
            str(figures["errors"]),
            str(figures["answered"]),
            str(figures["dropped"]),
            str(figures["lost"]),
            _pct(figures["slo_attainment"]),
            _pct(figures["slo_attainment_answered"]),
            " / ".join(_ms(figures[f"latency_p{percentile}_s"]) for percentile in (50, 95, 99)),
            _ms(figures["latency_max_s"]),
            f"{_ms(figures['post_p50_ms'], 1)} / {_ms(figures['post_p99_ms'], 1)}",
        )
    console.print(table)
    tot = summary["total"]
    if tot["shed_by_reason"]:
        console.print(
            "shed: "
            + ", ".join(f"{reason} x{count}" for reason, count in sorted(tot["shed_by_reason"].items()))
        )
    if tot["errors_by_kind"]:
        console.print(
            "errors: "
            + ", ".join(f"{kind} x{count}" for kind, count in sorted(tot["errors_by_kind"].items()))
        )
    if tot["drop_reasons"]:
        console.print(
            "dropped: "
            + ", ".join(f"{reason} x{count}" for reason, count in sorted(tot["drop_reasons"].items()))
        )
    loc = summary.get("locust") or {}
    if loc:
        console.print(
            f"locust (every request, result polls included): {loc['requests']:.0f} requests, "
            f"{loc['failures']:.0f} failed, {loc['rps']:.2f} req/s, "
            f"p50 / p95 / p99 {loc['p50_ms']:.0f} / {loc['p95_ms']:.0f} / {loc['p99_ms']:.0f} ms"
        )
    console.print(f"load average during the run: {summary['loadavg']}")
    for label, path in summary["files"].items():
        console.print(f"{label}: {path}")


# -- the command -------------------------------------------------------------------------------------


def _target_apps(url: str, key: str, wanted: list[str] | None) -> dict[str, dict[str, Any]]:
    # CLI start-up: loaded when this command runs
    import httpx

    try:
        response = httpx.get(f"{url.rstrip('/')}/v1/apps", headers={"x-api-key": key}, timeout=30)
    except httpx.HTTPError as exc:
        raise UsageError(f"cannot reach {url}: {exc}") from exc
    if response.status_code != 200:
        raise UsageError(f"{url}/v1/apps answered {response.status_code}: {response.text[:200]}")
    deployed = {app["name"]: app for app in response.json().get("apps", [])}
    apps = wanted or [app for app in deployed if app in USER_CLASSES]
    missing = [app for app in apps if app not in deployed]
    if missing or not apps:
        have = ", ".join(deployed) or "none"
        raise UsageError(f"not deployed at {url}: {', '.join(missing) or 'any demo app'} (deployed: {have})")
    return {app: deployed[app] for app in apps}


def _validate(args: argparse.Namespace) -> None:
    # CLI start-up: loaded when this command runs
    from core.ids import MAX_FRAMES_PER_POST

    for name in ("rate", "plan_rate", "slo"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {value:g}")
    if args.drain < 0:
        raise UsageError(f"--drain must not be negative, got {args.drain:g}")
    if args.frames_per_post is not None and not 1 <= args.frames_per_post <= MAX_FRAMES_PER_POST:
        raise UsageError(
            f"--frames-per-post must be between 1 and {MAX_FRAMES_PER_POST}, got {args.frames_per_post}"
        )
    local_only = (args.plan_rate, args.slo, args.epoch, args.retention)
    if args.target and any(value is not None for value in local_only):
        raise UsageError(
            "--plan-rate, --slo, --epoch and --retention apply to the local stack only, not to --target"
        )


def run(args: argparse.Namespace) -> int:
    # CLI start-up: loaded when this command runs
    from loadtest.analysis import read_outcomes, read_stats, summarise_run
    from loadtest.rates import LoadPlan

    _validate(args)
    out = Path(args.out or Path("loadtest-out") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    report: dict[str, Any] | None = None
    if args.target:
        key = args.api_key or os.environ.get("SKINFLINT_API_KEY")
        if not key:
            raise UsageError("--target needs --api-key (or SKINFLINT_API_KEY)")
        deployed = _target_apps(args.target, key, args.apps)
        apps = list(deployed)
        rate = args.rate or min(float(app.get("frame_rate") or 0) for app in deployed.values())
        if rate <= 0:
            raise UsageError("the deployed apps list no planned frame rate: pass --rate")
        plan = LoadPlan(
            args.shape,
            rate,
            args.duration,
            apps=len(apps),
            drain_s=args.drain,
            frames_per_post=args.frames_per_post or 0,
        )
        t0 = time.time()
        rc, paths = run_locust(
            args.target, key, apps, plan, out, args.json, args.phases, args.collect or "during"
        )
        t1 = time.time()
        target = args.target
        if args.report:
            report = _report(None, apps, t0, min(t1, t0 + plan.duration_s + plan.drain_s), out)
    else:
        apps = args.apps or ["traffic"]
        plan_rate = args.plan_rate or args.rate or 4.0
        rate = args.rate or plan_rate
        plan = LoadPlan(
            args.shape,
            rate,
            args.duration,
            apps=len(apps),
            drain_s=args.drain,
            frames_per_post=args.frames_per_post or 0,
        )
        rc, paths, target, report = _run_local(args, apps, plan_rate, plan, out)
    if rc not in (0, None):
        tail = (
            " ".join(paths["log"].read_text(errors="replace").strip().splitlines()[-2:])
            if paths["log"].exists()
            else ""
        )
        raise UsageError(f"locust exited with {rc}: {tail or 'see ' + str(out)}")
    summary = summarise_run(read_outcomes(paths["outcomes"]), read_stats(paths["stats_csv"]), plan.duration_s)
    summary.update(
        phases=args.phases,
        frames_per_post=plan.frames_per_post or "auto",
        collect=args.collect or ("during" if args.target else "after"),
        shape=plan.shape,
        rate=plan.rate,
        duration_s=plan.duration_s,
        target=target,
        loadavg=" ".join(f"{load:.2f}" for load in os.getloadavg()),
        files={name: str(path) for name, path in paths.items() if path.exists()},
    )
    if report is not None:
        summary["cost_report"] = report
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    if args.json:
        print(json.dumps(summary, indent=1, default=str))
    else:
        print_tables(summary)
        if report is not None:
            # CLI start-up: loaded when this command runs
            from skinflint.commands.report import print_report

            print_report(report)
    bad = summary["total"]["lost"] > 0 or summary["total"]["errors"] > 0
    return 1 if bad else 0


def _run_local(
    args: argparse.Namespace, apps: list[str], plan_rate: float, plan: Any, out: Path
) -> tuple[int, dict[str, Path], str, dict[str, Any] | None]:
    # CLI start-up: loaded when this command runs
    from core.errors import DataPlaneError
    from skinflint.commands.up import _log_to_stderr, stack_retention
    from skinflint.local.launch import DEFAULT_EPOCH_S, make_stack
    from skinflint.local.stack import StackError

    log = _log_to_stderr(args.json)
    retention = stack_retention(args.retention, plan.duration_s + plan.drain_s)
    stack = make_stack(
        apps,
        plan_rate,
        args.slo,
        log,
        args.log_dir,
        epoch_s=args.epoch or DEFAULT_EPOCH_S,
        retention_s=retention,
    )
    report = None
    try:
        try:
            info = stack.start()
        except (DataPlaneError, StackError) as exc:
            raise UsageError(f"local stack failed to start: {exc}") from exc
        log(f"{plan.shape} load: {plan.rate:g} frames/s per app (plan: {plan_rate:g}), {plan.duration_s:g} s")
        t0 = time.time()
        rc, paths = run_locust(
            info.url, info.api_key, apps, plan, out, args.json, args.phases, args.collect or "after"
        )
        t1 = time.time()
        if args.report:
            log("waiting for the last metrics, then reading CloudWatch (moto)")
            time.sleep(METRICS_FLUSH_S)
            report = _report(info.endpoint_url, apps, t0, min(t1, t0 + plan.duration_s + plan.drain_s), out)
    finally:
        stack.stop()
    return rc, paths, f"the local stack ({info.url})", report


def _report(endpoint: str | None, apps: list[str], t0: float, t1: float, out: Path) -> dict[str, Any]:
    """The cost report of the run's window (the run and its drain, not the collection of results
    after it), with its plots and HTML page next to locust's."""
    # CLI start-up: loaded when this command runs
    from skinflint.commands.report import build_report, write_outputs

    report = build_report(endpoint=endpoint, apps=apps, start=t0, end=t1 + METRICS_FLUSH_S)
    report["files"] = write_outputs(report, str(out / "report"), str(out / "report.html"))
    return report
