"""``skinflint demo``: the README's main command. Brings the local stack up (control loop and
emulated fleet included), streams a generated video (deterministic synthetic frames, JPEG) at the
registered rate through the front API in JSON batches (``--frames-per-post``: one POST of N frames
every N / rate seconds; by default as many as arrive in half the SLO, 1 to 10), waits for every
result and prints a summary: frames sent / answered / dropped / refused / lost, SLO attainment,
end-to-end latency percentiles, each module's measured worst case against the plan's, planned cost,
the fleet the control loop ran (instances per hardware class, plan versions, epochs), and the AWS
requests the stack made per frame while it streamed (moto's request meter, by service and action)
with the billing units AWS would charge for them (DynamoDB write and read units, SQS 64 KB chunks,
S3 requests, the API requests and front invocations of the client's POSTs and GETs). Emulated GPU
hardware is labelled as such."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skinflint.commands.up import add_stack_arguments, stack_retention
from skinflint.errors import UsageError
from skinflint.local.launch import make_stack

if TYPE_CHECKING:
    import argparse

    from planner.models import Plan
    from skinflint.local.stack import StackInfo

DEFAULT_DURATION_S = 60.0
DEFAULT_FRAMES_PER_POST = 10  # the JSON batch form's limit (core/ids.py MAX_FRAMES_PER_POST)


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "demo", help="run an app end to end on the local stack and print a summary", description=__doc__
    )
    add_stack_arguments(parser, multi_app=False)
    parser.add_argument(
        "--duration",
        type=float,
        default=DEFAULT_DURATION_S,
        help=f"seconds of video to stream (default {DEFAULT_DURATION_S:g})",
    )
    parser.add_argument(
        "--frames-per-post",
        type=int,
        default=None,
        metavar="N",
        help='frames per POST, 1-10, sent as the JSON batch form {"frames": [...]}: at rate R one POST '
        "of N frames every N/R s, when its last frame is due (default: the frames of half the SLO, "
        "R x SLO / 2, within 1-10: a POST is a burst the plan's windows must absorb within the SLO; "
        "1 sends each frame as its own image/jpeg POST). A POST larger than the app's plan can ever "
        "take (503 batch_too_large) is split into POSTs of the max_frames the front names, and so "
        "are the rest",
    )
    parser.set_defaults(func=run)


def auto_frames_per_post(rate: float, slo_s: float) -> int:
    """The demo's default POST size: the frames that arrive in half the SLO, 1 to 10 (a POST
    arrives as a burst; much more than that does not fit the plan's windows within the SLO)."""
    return max(1, min(DEFAULT_FRAMES_PER_POST, int(rate * slo_s / 2)))


def _posts(count: int, per_post: int) -> list[range]:
    """The frame indices of each POST: ``per_post`` consecutive frames each, the last POST the rest."""
    return [range(first, min(first + per_post, count)) for first in range(0, count, per_post)]


def _stream(
    info: StackInfo,
    app: str,
    frames: list[bytes],
    rate: float,
    quiet: bool,
    per_post: int = 1,
    calls: Counter[str] | None = None,
) -> list[str | None]:
    """POST the frames ``per_post`` at a time (the JSON batch form; one frame alone as image/jpeg),
    each POST when its last frame is due (frame k at k / rate: one POST every per_post / rate s, the
    stream as long as one frame per POST), open loop: each POST is sent on time from a pool of
    senders whatever the previous ones take, so a slow answer never bunches the POSTs after it
    (a closed loop would send them back to back: bursts the plan's uniform arrivals do not have).
    A POST refused as larger than the plan can ever take (503 ``batch_too_large``) is sent again
    split into POSTs of its ``max_frames``, and the later POSTs are split the same way. Returns the
    request ids in frame order (None: refused); ``calls["post"]`` counts the POSTs sent."""
    # CLI start-up: loaded when this command runs
    import base64
    import threading

    import httpx
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    auth = {"x-api-key": info.api_key}
    most = [per_post]  # frames per POST the front takes (lowered by batch_too_large)
    most_lock = threading.Lock()

    def send(client: httpx.Client, batch: list[bytes]) -> tuple[int, Any]:
        if calls is not None:
            with most_lock:
                calls["post"] += 1
        if len(batch) == 1:
            headers = {**auth, "content-type": "image/jpeg"}
            response = client.post(f"/v1/apps/{app}/frames", content=batch[0], headers=headers)
        else:
            body = {"frames": [{"image_b64": base64.b64encode(frame).decode()} for frame in batch]}
            response = client.post(f"/v1/apps/{app}/frames", json=body, headers=auth)
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, {}

    def post(client: httpx.Client, batch: list[bytes]) -> list[str | None]:
        out: list[str | None] = []
        while len(out) < len(batch):
            size = min(most[0], len(batch) - len(out))
            status, answer = send(client, batch[len(out) : len(out) + size])
            if status == 202:
                out.extend(str(accepted["request_id"]) for accepted in answer["accepted"])
            elif (
                size > 1
                and status == 503
                and answer.get("error") == "batch_too_large"
                and answer.get("max_frames")
            ):
                with most_lock:
                    most[0] = max(1, min(most[0], int(answer["max_frames"]), size - 1))
            else:
                out.extend([None] * size)
        return out

    with (
        httpx.Client(base_url=info.url, timeout=30, limits=httpx.Limits(max_connections=16)) as client,
        ThreadPoolExecutor(max_workers=16, thread_name_prefix="sender") as pool,
        Progress(
            TextColumn("[bold]streaming"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[note]}"),
            console=console,
            transient=True,
            disable=quiet or not console.is_terminal,
        ) as prog,
    ):
        task = prog.add_task("frames", total=len(frames), note="")
        start = time.time() + 0.2
        futures = []
        for indices in _posts(len(frames), per_post):
            delay = start + indices[-1] / rate - time.time()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(post, client, [frames[index] for index in indices]))
            done = [future.result() for future in futures if future.done() and future.exception() is None]
            refused = sum(rid is None for ids in done for rid in ids)
            prog.update(task, completed=sum(map(len, done)), note=f"{refused} refused" if refused else "")
        ids = [rid for future in futures for rid in future.result()]
    if most[0] < per_post:
        console.print(
            f"note: {app}'s plan takes at most {most[0]} frames per POST (503 batch_too_large): "
            f"sent {most[0]} at a time instead of {per_post}"
        )
    return ids


def _collect(
    info: StackInfo, ids: list[str | None], timeout_s: float, calls: Counter[str] | None = None
) -> list[Any]:
    """Long-poll each request until it is finished or ``timeout_s`` has passed overall
    (``calls["get"]`` counts the GETs)."""
    # CLI start-up: loaded when this command runs
    import httpx

    from core.schema import ResultOut

    out: list[Any] = []
    end = time.time() + timeout_s
    with httpx.Client(base_url=info.url, timeout=30, headers={"x-api-key": info.api_key}) as client:
        for rid in ids:
            if rid is None:
                out.append(None)
                continue
            res = None
            while True:
                wait = max(0.0, min(5.0, end - time.time()))
                response = client.get(f"/v1/requests/{rid}", params={"wait": f"{wait:.2f}"})
                if calls is not None:
                    calls["get"] += 1
                if response.status_code == 200:
                    res = ResultOut.model_validate(response.json())
                if (res is not None and res.status != "queued") or time.time() >= end:
                    break
            out.append(res)
    return out


def _fmt_s(seconds: float | None) -> str:
    return (
        "-"
        if seconds is None or (isinstance(seconds, float) and math.isnan(seconds))
        else f"{seconds * 1e3:.0f} ms"
    )


def _fmt_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{count} x {hw}" for hw, count in sorted(counts.items()) if count) or "none"


def _served_plan(deployments: list[Any], fallback: Plan) -> tuple[Plan, list[str]]:
    """The plan to compare the measurements with: the last version's, each module's planned worst
    case the largest of the versions that served during the run (a frame may have met any)."""
    if not deployments:
        return fallback, []
    last = deployments[-1].plan
    modules = {}
    for name, mp in last.modules.items():
        worst = max(
            deployment.plan.modules[name].worst_case_latency_s
            for deployment in deployments
            if name in deployment.plan.modules
        )
        modules[name] = mp.model_copy(update={"worst_case_latency_s": worst})
    notes = []
    if len(deployments) > 1:
        notes.append(
            f"{len(deployments)} plan versions served during the run: 'planned worst' is the largest "
            "of them; 'over plan' counts the tasks that took longer than the version serving when "
            "they were enqueued and when they finished planned"
        )
    return last.model_copy(update={"modules": modules}), notes


def _planned_at(stack: Any, deployments: list[Any]) -> Any:
    """``(module, at_s) -> planned worst case`` of the version serving at ``at_s`` (by activation time,
    read from the plan store while the stack runs; before the first activation: the first version)."""
    store = stack.plan_store
    current = store.current() if store is not None else None
    timeline = []
    for deployment in deployments:
        manifest = (
            current
            if current is not None and current.version == deployment.version
            else store.manifest(deployment.version)
        )
        if manifest is not None:
            timeline.append((manifest.activate_at, deployment.version, deployment.plan))
    timeline.sort(key=lambda entry: (entry[0], entry[1]))

    def planned_at(module: str, at_s: float) -> float | None:
        if not timeline:
            return None
        plan = timeline[0][2]
        for at, _, served in timeline:
            if at <= at_s:
                plan = served
        mp = plan.modules.get(module)
        return mp.worst_case_latency_s if mp is not None else None

    return planned_at


def _timeline(epochs: list[dict[str, Any]], app: str, t0: float) -> list[dict[str, Any]]:
    """Each epoch of the run, ``t_s`` seconds after the first frame was sent: what it did, the
    app's observed and planned rate, and how long it took (``timings_ms``)."""
    out = []
    for epoch in epochs:
        row: dict[str, Any] = {"t_s": round(epoch.get("at", t0) - t0, 2), "status": epoch.get("status")}
        if epoch.get("version") is not None:
            row["version"] = epoch["version"]
        if epoch.get("rate_window"):
            row["rate_window_s"] = [round(at - t0, 2) for at in epoch["rate_window"]]
        if app in epoch.get("rates", {}):
            row["rates"] = epoch["rates"][app]
        if epoch.get("timings_ms"):
            row["timings_ms"] = epoch["timings_ms"]
        out.append(row)
    return out


def _fleet_figures(stack: Any, app: str, t0: float) -> dict[str, Any]:
    """What the control loop ran: epochs (and their timeline from ``t0``, the first frame), versions,
    instances and billed cost of the last version."""
    store = stack.plan_store
    current = store.current() if store is not None else None
    return {
        "epochs": len(stack.epochs),
        "timeline": _timeline(stack.epochs, app, t0),
        "epoch_s": stack.config.epoch_s,
        "versions": stack.versions(),
        "instances": dict(current.counts) if current else {},
        "billed_per_hour": current.billed_per_hour if current else 0.0,
        "occupancy_per_hour": current.occupancy_per_hour if current else 0.0,
        "scale_changes": [epoch["scaled"] for epoch in stack.epochs if epoch.get("scaled")],
        # service-time corrections the control loop learned from the workers (module@hardware -> s)
        "corrections": next(
            (
                epoch["corrections"].get(app, {})
                for epoch in reversed(stack.epochs)
                if epoch.get("corrections")
            ),
            {},
        ),
    }


def _fmt_frac(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _fmt_all_in(all_in: dict[str, Any] | None) -> str:
    """'$1.212/h ($1.05 per million frames) = EC2 fleet $1.137 + data plane $0.075 (dynamodb ...)'."""
    if not all_in:
        return "not metered (the request meter did not answer)"
    items = ", ".join(f"{service} ${usd:.4f}" for service, usd in all_in["data_plane"].items())
    return (
        f"${all_in['all_in_per_hour']:.3f}/h "
        f"(${all_in['all_in_per_million_frames']:.2f} per million frames) = "
        f"EC2 fleet ${all_in['fleet_per_hour']:.3f} + data plane ${all_in['data_plane_per_hour']:.4f} "
        f"({items}; the billing units measured above at {all_in['prices']}; not priced: "
        f"{all_in['not_priced']})"
    )


def _fmt_requests(requests: dict[str, Any] | None) -> str:
    """'25.1 per frame (100/s): sqs.ReceiveMessage 30 %, ...' (the five largest actions)."""
    if not requests or not requests["total"]:
        return "not metered"
    top = ", ".join(
        f"{action} {count / requests['total']:.0%}"
        for action, count in list(requests["by_action"].items())[:5]
    )
    line = f"{requests['per_frame']:.1f} per frame ({requests['per_second']:.0f}/s): {top}"
    callers = requests.get("by_caller_per_frame") or {}
    if callers:
        line += "; per frame by process: " + ", ".join(
            f"{who} {figures['total']:.2f}" for who, figures in callers.items()
        )
    units = requests.get("billing_units_per_frame") or {}
    if units:
        line += "; billed per frame: " + ", ".join(
            f"{name.replace('_', ' ')} {value:.2f}" for name, value in units.items() if value
        )
    emulated = sum((requests.get("emulation_by_action") or {}).values())
    if emulated:
        line += f"; not counted: {emulated} of the stack's stand-ins for AWS (its EMF extraction)"
    cpu = requests.get("server_cpu_s_by_action") or {}
    if cpu and requests["seconds"] > 0:
        busiest = ", ".join(
            f"{action} {seconds / requests['server_cpu_s']:.0%}" for action, seconds in list(cpu.items())[:3]
        )
        line += (
            f"; server CPU {requests['server_cpu_s'] / requests['seconds']:.2f} of a core, "
            f"{requests['server_cpu_ms_per_request']:.1f} ms/request ({busiest})"
        )
    return line


def _print_table(summary: dict[str, Any]) -> None:
    # CLI start-up: loaded when this command runs
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if Console().is_terminal else 130)
    head = Table(
        title=f"skinflint demo: {summary['app']} at {summary['rate']:g} frames/s "
        f"for {summary['duration_s']:g} s",
        show_header=False,
    )
    head.add_column(style="bold")
    head.add_column()
    rows = [
        ("frames sent", f"{summary['frames_sent']} (up to {summary['frames_per_post']} per POST)"),
        ("answered", str(summary["answered"])),
        ("dropped early (reported)", str(summary["dropped"])),
        ("refused (admission control)", str(summary["refused"])),
        ("lost", str(summary["lost"])),
        ("SLO", f"{summary['slo_s'] * 1e3:.0f} ms"),
        (
            "SLO attainment (answered)",
            f"{summary['slo_attainment']:.2%}" if not math.isnan(summary["slo_attainment"]) else "-",
        ),
        (
            "latency p50 / p95 / p99",
            " / ".join(_fmt_s(summary[f"latency_p{percentile}_s"]) for percentile in (50, 95, 99)),
        ),
        ("latency max", _fmt_s(summary["latency_max_s"])),
        ("planned EC2 fleet (billed)", f"${summary['planned_billed_per_hour']:.3f}/h"),
        ("planned EC2 fleet (occupancy)", f"${summary['planned_occupancy_per_hour']:.3f}/h"),
        ("fleet (packed instances)", _fmt_counts(summary["fleet"]["instances"])),
        ("all-in cost", _fmt_all_in(summary.get("all_in"))),
        (
            "control loop",
            f"{summary['fleet']['epochs']} epoch(s) of {summary['fleet']['epoch_s']:g} s, "
            f"plan version(s) {', '.join(f'v{version}' for version in summary['fleet']['versions'])}",
        ),
        ("planning overhead per hop", _fmt_s(summary["overhead_s"])),
        (
            "learned service corrections",
            ", ".join(
                f"{where} +{_fmt_s(extra_s)}"
                for where, extra_s in sorted(summary["fleet"]["corrections"].items())
            )
            or "none",
        ),
        ("AWS requests (moto)", _fmt_requests(summary["aws_requests"])),
        ("emulated hardware", ", ".join(summary["emulated_hardware"]) or "none"),
        ("wall time", f"{summary['wall_s']:.0f} s"),
    ]
    for label, value in rows:
        head.add_row(label, value)
    console.print(head)
    mods = Table(title="per module: measured worst case vs planned")
    for col in (
        "module",
        "hardware",
        "machines",
        "batch",
        "tasks",
        "dropped",
        "measured p99",
        "measured worst",
        "of it: wait / run",
        "planned worst",
        "over plan",
        "device occupancy (planned / measured)",
    ):
        mods.add_column(col)
    for name, module in summary["modules"].items():
        over = f"{module['over_plan']} of {module['tasks']}" if module["over_plan"] else "none"
        mods.add_row(
            name,
            ", ".join(module["hardware"]),
            str(module["machines"]),
            ",".join(map(str, module["batch"])),
            str(module["tasks"]),
            str(module["dropped"]),
            _fmt_s(module["measured_p99_s"]),
            _fmt_s(module["measured_worst_s"]),
            f"{_fmt_s(module['wait_worst_s'])} / {_fmt_s(module['run_worst_s'])}",
            _fmt_s(module["planned_worst_s"]),
            over,
            " / ".join(_fmt_frac(module[f"device_occupancy_{which}"]) for which in ("planned", "measured")),
        )
    console.print(mods)
    for note in summary["notes"]:
        console.print(f"note: {note}")


def run(args: argparse.Namespace) -> int:
    # CLI start-up: loaded when this command runs
    from core.errors import DataPlaneError
    from profiles.aws_prices import load_aws_prices
    from skinflint.commands.up import _log_to_stderr
    from skinflint.local.stack import StackError
    from skinflint.local.summary import all_in_figures, aws_request_figures, summarise, task_rows
    from skinflint.local.video import synthetic_frames

    if args.duration <= 0:
        raise UsageError(f"--duration must be positive, got {args.duration:g}")
    if args.frames_per_post is not None and not 1 <= args.frames_per_post <= DEFAULT_FRAMES_PER_POST:
        raise UsageError(f"--frames-per-post must be between 1 and 10, got {args.frames_per_post}")
    t0 = time.time()
    log = _log_to_stderr(args.json)
    count = max(1, round(args.duration * args.rate))
    frames = synthetic_frames(count)
    retention = stack_retention(args.retention, args.duration)
    stack = make_stack([args.app], args.rate, args.slo, log, args.log_dir, args.epoch, retention)
    try:
        try:
            info = stack.start()
        except (DataPlaneError, StackError) as exc:
            raise UsageError(f"local stack failed to start: {exc}") from exc
        lp = info.plans[args.app]
        if args.frames_per_post is None:
            args.frames_per_post = auto_frames_per_post(args.rate, lp.slo_s)
        log(
            f"streaming {count} frames at {args.rate:g} frames/s to {info.url}, "
            f"{args.frames_per_post} per POST"
        )
        streamed_at = time.time()
        meter_before = stack.aws_requests()
        calls: Counter[str] = Counter()
        ids = _stream(info, args.app, frames, args.rate, args.json, args.frames_per_post, calls)
        log("waiting for results")
        results = _collect(info, ids, timeout_s=lp.slo_s + 30.0, calls=calls)
        meter_after, seconds = stack.aws_requests(), time.time() - streamed_at
        requests = aws_request_figures(meter_before, meter_after, len(ids), seconds, since=streamed_at)
        if requests is not None and ids:
            # behind API Gateway each of the client's requests is an API request and a front Lambda
            # invocation: the POSTs, and the GETs of the results (a push sink would need none)
            api = {"api_requests_post": calls["post"], "api_requests_get": calls["get"]}
            requests["billing_units"].update(api)
            requests["billing_units_per_frame"].update({k: v / len(ids) for k, v in api.items()})
        deployments = stack.deployments(args.app)
        planned_at = _planned_at(stack, deployments)
        fleet = _fleet_figures(stack, args.app, streamed_at)
    finally:
        stack.stop()
    plan, plan_notes = _served_plan(deployments, lp.plan)
    emulated = sorted(
        {hw for deployment in deployments for hw in deployment.emulated_hardware} or set(lp.emulated_hardware)
    )
    slo_s = deployments[-1].slo_s if deployments else lp.slo_s
    summary = summarise(len(ids), results, plan, slo_s, emulated, planned_at, window_s=args.duration)
    # a frame the front refused (admission control: 429/503 with Retry-After) was answered, not lost
    tasks_file = Path(info.log_dir) / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(row) + "\n" for row in task_rows(results, planned_at)))
    summary["refused"] = sum(1 for rid in ids if rid is None)
    summary["lost"] -= summary["refused"]
    summary.update(
        app=args.app,
        rate=args.rate,
        duration_s=args.duration,
        frames_per_post=args.frames_per_post,
        overhead_s=lp.overhead_s,
        notes=lp.notes + plan_notes,
        fleet=fleet,
        aws_requests=requests,
        all_in=(
            all_in_figures(
                requests["billing_units_per_frame"], args.rate, fleet["billed_per_hour"], load_aws_prices()
            )
            if requests and requests.get("billing_units_per_frame")
            else None
        ),
        wall_s=time.time() - t0,
        log_dir=info.log_dir,
        tasks_file=str(tasks_file),
    )
    if args.json:
        print(json.dumps(summary, indent=1, default=str))
    else:
        _print_table(summary)
    return 0 if summary["lost"] == 0 else 1
