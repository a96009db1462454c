"""``skinflint demo``: the README's main command. Brings the local stack up (control loop and
emulated fleet included), streams a generated video (deterministic synthetic frames, JPEG) at the
registered rate through the front API, waits for every result and prints a summary: frames sent /
answered / dropped / refused / lost, SLO attainment, end-to-end latency percentiles, each module's
measured worst case against the plan's, planned cost, the fleet the control loop ran (instances per
hardware class, plan versions, epochs), and the AWS requests the stack made per frame while it
streamed (moto's request meter, by service and action). Emulated GPU hardware is labelled as such."""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any

from skinflint.commands.up import add_stack_arguments, make_stack, stack_retention
from skinflint.errors import UsageError

if TYPE_CHECKING:
    import argparse

    from planner.models import Plan
    from skinflint.local.stack import StackInfo

DEFAULT_DURATION_S = 60.0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="run an app end to end on the local stack and print a summary", description=__doc__
    )
    add_stack_arguments(p, multi_app=False)
    p.add_argument(
        "--duration",
        type=float,
        default=DEFAULT_DURATION_S,
        help=f"seconds of video to stream (default {DEFAULT_DURATION_S:g})",
    )
    p.set_defaults(func=run)


def _stream(info: StackInfo, app: str, frames: list[bytes], rate: float, quiet: bool) -> list[str | None]:
    """POST every frame at its time (k / rate), open loop: each POST is sent on time from a pool of
    senders whatever the previous ones take, so a slow answer never bunches the frames after it
    (a closed loop would send them back to back: bursts the plan's uniform arrivals do not have).
    Returns the request ids in frame order (None: refused)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    headers = {"x-api-key": info.api_key, "content-type": "image/jpeg"}
    refused = 0

    def post(client: httpx.Client, frame: bytes) -> str | None:
        r = client.post(f"/v1/apps/{app}/frames", content=frame, headers=headers)
        return str(r.json()["accepted"][0]["request_id"]) if r.status_code == 202 else None

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
        for k, frame in enumerate(frames):
            delay = start + k / rate - time.time()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(post, client, frame))
            done = [f for f in futures if f.done()]
            refused = sum(1 for f in done if f.exception() is None and f.result() is None)
            prog.update(task, completed=len(done), note=f"{refused} refused" if refused else "")
        ids = [f.result() for f in futures]
    return ids


def _collect(info: StackInfo, ids: list[str | None], timeout_s: float) -> list[Any]:
    """Long-poll each request until it is finished or ``timeout_s`` has passed overall."""
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
                r = client.get(f"/v1/requests/{rid}", params={"wait": f"{wait:.2f}"})
                if r.status_code == 200:
                    res = ResultOut.model_validate(r.json())
                if (res is not None and res.status != "queued") or time.time() >= end:
                    break
            out.append(res)
    return out


def _fmt_s(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 1e3:.0f} ms"


def _fmt_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} x {hw}" for hw, n in sorted(counts.items()) if n) or "none"


def _served_plan(deployments: list[Any], fallback: Plan) -> tuple[Plan, list[str]]:
    """The plan to compare the measurements with: the last version's, each module's planned worst
    case the largest of the versions that served during the run (a frame may have met any)."""
    if not deployments:
        return fallback, []
    last = deployments[-1].plan
    modules = {}
    for name, mp in last.modules.items():
        worst = max(d.plan.modules[name].worst_case_latency_s for d in deployments if name in d.plan.modules)
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
    """``(module, t) -> planned worst case`` of the version serving at ``t`` (by activation time,
    read from the plan store while the stack runs; before the first activation: the first version)."""
    store = stack.plan_store
    current = store.current() if store is not None else None
    timeline = []
    for d in deployments:
        m = current if current is not None and current.version == d.version else store.manifest(d.version)
        if m is not None:
            timeline.append((m.activate_at, d.version, d.plan))
    timeline.sort(key=lambda x: (x[0], x[1]))

    def planned_at(module: str, t: float) -> float | None:
        if not timeline:
            return None
        plan = timeline[0][2]
        for at, _, p in timeline:
            if at <= t:
                plan = p
        mp = plan.modules.get(module)
        return mp.worst_case_latency_s if mp is not None else None

    return planned_at


def _timeline(epochs: list[dict[str, Any]], app: str, t0: float) -> list[dict[str, Any]]:
    """Each epoch of the run, ``t_s`` seconds after the first frame was sent: what it did, the
    app's observed and planned rate, and how long it took (``timings_ms``)."""
    out = []
    for e in epochs:
        row: dict[str, Any] = {"t_s": round(e.get("at", t0) - t0, 2), "status": e.get("status")}
        if e.get("version") is not None:
            row["version"] = e["version"]
        if e.get("rate_window"):
            row["rate_window_s"] = [round(x - t0, 2) for x in e["rate_window"]]
        if app in e.get("rates", {}):
            row["rates"] = e["rates"][app]
        if e.get("timings_ms"):
            row["timings_ms"] = e["timings_ms"]
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
        "scale_changes": [e["scaled"] for e in stack.epochs if e.get("scaled")],
        # service-time corrections the control loop learned from the workers (module@hardware -> s)
        "corrections": next(
            (e["corrections"].get(app, {}) for e in reversed(stack.epochs) if e.get("corrections")), {}
        ),
    }


def _fmt_requests(r: dict[str, Any] | None) -> str:
    """'25.1 per frame (100/s): sqs.ReceiveMessage 30 %, ...' (the five largest actions)."""
    if not r or not r["total"]:
        return "not metered"
    top = ", ".join(f"{k} {v / r['total']:.0%}" for k, v in list(r["by_action"].items())[:5])
    line = f"{r['per_frame']:.1f} per frame ({r['per_second']:.0f}/s): {top}"
    emulated = sum((r.get("emulation_by_action") or {}).values())
    if emulated:
        line += f"; not counted: {emulated} of the stack's stand-ins for AWS (its EMF extraction)"
    cpu = r.get("server_cpu_s_by_action") or {}
    if cpu and r["seconds"] > 0:
        busiest = ", ".join(f"{k} {v / r['server_cpu_s']:.0%}" for k, v in list(cpu.items())[:3])
        line += (
            f"; server CPU {r['server_cpu_s'] / r['seconds']:.2f} of a core, "
            f"{r['server_cpu_ms_per_request']:.1f} ms/request ({busiest})"
        )
    return line


def _print_table(s: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if Console().is_terminal else 130)
    head = Table(
        title=f"skinflint demo: {s['app']} at {s['rate']:g} frames/s for {s['duration_s']:g} s",
        show_header=False,
    )
    head.add_column(style="bold")
    head.add_column()
    rows = [
        ("frames sent", str(s["frames_sent"])),
        ("answered", str(s["answered"])),
        ("dropped early (reported)", str(s["dropped"])),
        ("refused (admission control)", str(s["refused"])),
        ("lost", str(s["lost"])),
        ("SLO", f"{s['slo_s'] * 1e3:.0f} ms"),
        (
            "SLO attainment (answered)",
            f"{s['slo_attainment']:.2%}" if not math.isnan(s["slo_attainment"]) else "-",
        ),
        ("latency p50 / p95 / p99", " / ".join(_fmt_s(s[f"latency_p{q}_s"]) for q in (50, 95, 99))),
        ("latency max", _fmt_s(s["latency_max_s"])),
        ("planned cost (billed)", f"${s['planned_billed_per_hour']:.3f}/h"),
        ("planned cost (occupancy)", f"${s['planned_occupancy_per_hour']:.3f}/h"),
        ("fleet (packed instances)", _fmt_counts(s["fleet"]["instances"])),
        ("fleet cost (billed)", f"${s['fleet']['billed_per_hour']:.3f}/h"),
        (
            "control loop",
            f"{s['fleet']['epochs']} epoch(s) of {s['fleet']['epoch_s']:g} s, "
            f"plan version(s) {', '.join(f'v{v}' for v in s['fleet']['versions'])}",
        ),
        ("planning overhead per hop", _fmt_s(s["overhead_s"])),
        (
            "learned service corrections",
            ", ".join(f"{k} +{_fmt_s(v)}" for k, v in sorted(s["fleet"]["corrections"].items())) or "none",
        ),
        ("AWS requests (moto)", _fmt_requests(s["aws_requests"])),
        ("emulated hardware", ", ".join(s["emulated_hardware"]) or "none"),
        ("wall time", f"{s['wall_s']:.0f} s"),
    ]
    for k, v in rows:
        head.add_row(k, v)
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
    ):
        mods.add_column(col)
    for name, m in s["modules"].items():
        over = f"{m['over_plan']} of {m['tasks']}" if m["over_plan"] else "none"
        mods.add_row(
            name,
            ", ".join(m["hardware"]),
            str(m["machines"]),
            ",".join(map(str, m["batch"])),
            str(m["tasks"]),
            str(m["dropped"]),
            _fmt_s(m["measured_p99_s"]),
            _fmt_s(m["measured_worst_s"]),
            f"{_fmt_s(m['wait_worst_s'])} / {_fmt_s(m['run_worst_s'])}",
            _fmt_s(m["planned_worst_s"]),
            over,
        )
    console.print(mods)
    for note in s["notes"]:
        console.print(f"note: {note}")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from core.errors import DataPlaneError
    from skinflint.commands.up import _log_to_stderr
    from skinflint.local.stack import StackError
    from skinflint.local.summary import aws_request_figures, summarise, task_rows
    from skinflint.local.video import synthetic_frames

    if args.duration <= 0:
        raise UsageError(f"--duration must be positive, got {args.duration:g}")
    t0 = time.time()
    log = _log_to_stderr(args.json)
    n = max(1, round(args.duration * args.rate))
    frames = synthetic_frames(n)
    retention = stack_retention(args.retention, args.duration)
    stack = make_stack([args.app], args.rate, args.slo, log, args.log_dir, args.epoch, retention)
    try:
        try:
            info = stack.start()
        except (DataPlaneError, StackError) as exc:
            raise UsageError(f"local stack failed to start: {exc}") from exc
        lp = info.plans[args.app]
        log(f"streaming {n} frames at {args.rate:g} frames/s to {info.url}")
        streamed_at = time.time()
        meter_before = stack.aws_requests()
        ids = _stream(info, args.app, frames, args.rate, args.json)
        log("waiting for results")
        results = _collect(info, ids, timeout_s=lp.slo_s + 30.0)
        meter_after, seconds = stack.aws_requests(), time.time() - streamed_at
        requests = aws_request_figures(meter_before, meter_after, len(ids), seconds, since=streamed_at)
        deployments = stack.deployments(args.app)
        planned_at = _planned_at(stack, deployments)
        fleet = _fleet_figures(stack, args.app, streamed_at)
    finally:
        stack.stop()
    plan, plan_notes = _served_plan(deployments, lp.plan)
    emulated = sorted({h for d in deployments for h in d.emulated_hardware} or set(lp.emulated_hardware))
    slo_s = deployments[-1].slo_s if deployments else lp.slo_s
    s = summarise(len(ids), results, plan, slo_s, emulated, planned_at)
    # a frame the front refused (admission control: 429/503 with Retry-After) was answered, not lost
    tasks_file = Path(info.log_dir) / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(row) + "\n" for row in task_rows(results, planned_at)))
    s["refused"] = sum(1 for rid in ids if rid is None)
    s["lost"] -= s["refused"]
    s.update(
        app=args.app,
        rate=args.rate,
        duration_s=args.duration,
        overhead_s=lp.overhead_s,
        notes=lp.notes + plan_notes,
        fleet=fleet,
        aws_requests=requests,
        wall_s=time.time() - t0,
        log_dir=info.log_dir,
        tasks_file=str(tasks_file),
    )
    if args.json:
        print(json.dumps(s, indent=1, default=str))
    else:
        _print_table(s)
    return 0 if s["lost"] == 0 else 1
