"""The demo's summary, computed from the results the API returned (pure: no I/O)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from planner.models import planned_device_occupancy
from skinflint.local.moto_server import EMULATION_PREFIX

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from core.schema import ResultOut
    from planner.models import ModulePlan, Plan

__all__ = ["aws_request_figures", "percentile", "summarise", "task_rows"]


def percentile(values: Sequence[float], percent: float) -> float:
    """Nearest-rank percentile (``percent`` in [0, 100]); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(percent / 100 * len(ordered)) - 1))
    return ordered[rank]


def _dispatch_figures(mp: ModulePlan) -> dict[str, Any]:
    """What a dispatch-aware plan (``planner.robust``) says the planned worst case is made of: Theorem
    1's figure, the schedule's bound, the burst of a child (largest, and its extra wait), and the
    headroom asked for (``child_headroom``) against the headroom planned (``headroom_used``: planned
    rate / expected rate - 1). None for a plan without them."""
    extra = mp.model_extra or {}
    dispatch = extra.get("dispatch")
    info: dict[str, Any] = dispatch if isinstance(dispatch, dict) else {}
    return {
        "theorem1_s": info.get("theorem1_s"),
        "schedule_s": info.get("schedule_s"),
        "burst": info.get("burst"),
        "burst_s": info.get("burst_s"),
        "spread_rate": info.get("spread_rate"),
        "required_rate": info.get("required_rate"),
        "child_headroom": extra.get("child_headroom"),
        "headroom_used": extra.get("headroom_used"),
    }


def _bound(
    planned_at: Callable[[str, float], float | None] | None, module: str, t0: float, t1: float
) -> float | None:
    if planned_at is None:
        return None
    figures = [figure for figure in (planned_at(module, t0), planned_at(module, t1)) if figure is not None]
    return max(figures) if figures else None


def summarise(
    sent: int,
    results: Sequence[ResultOut | None],
    plan: Plan,
    slo_s: float,
    emulated_hardware: Sequence[str],
    planned_at: Callable[[str, float], float | None] | None = None,
    window_s: float | None = None,
) -> dict[str, Any]:
    """``results[i]`` is the last answer for frame i (None when the front never accepted it).
    ``window_s``: how long the frames were streamed; with it each module's measured device
    occupancy (its batches' device time over its planned machines x ``window_s``) is given next to
    the plan's figure for it.
    ``planned_at(module, t)``: the module's planned worst case in the plan version serving at ``t``;
    a task is *over plan* when it took longer than that at both its enqueue and its finish time
    (a task that straddles a version change is held to the looser of the two). Without it, every
    task is held to ``plan``'s figure."""
    extra = plan.model_extra or {}
    answered = [result for result in results if result is not None and result.status == "done"]
    dropped = [result for result in results if result is not None and result.status == "dropped"]
    lost = sent - len(answered) - len(dropped)
    lat = [result.latency_s for result in answered if result.latency_s is not None]
    within = sum(1 for latency in lat if latency <= slo_s)
    modules: dict[str, dict[str, Any]] = {}
    for name, mp in plan.modules.items():
        hw = sorted({group.hardware for group in mp.groups})
        modules[name] = {
            "hardware": [
                f"{hardware} (emulated)" if hardware in emulated_hardware else hardware for hardware in hw
            ],
            "machines": sum(group.machines for group in mp.groups),
            "batch": [group.batch for group in mp.groups],
            "planned_worst_s": mp.worst_case_latency_s,
            "measured_worst_s": None,
            "measured_p99_s": None,
            "wait_worst_s": None,
            "run_worst_s": None,
            "over_plan": 0,
            "tasks": 0,
            "dropped": 0,
            "emulated": any(hardware in emulated_hardware for hardware in hw),
            "device_occupancy_planned": planned_device_occupancy(mp),
            "device_occupancy_measured": None,
            **_dispatch_figures(mp),
        }
    per_module: dict[str, list[float]] = {module: [] for module in modules}
    waits: dict[str, list[float]] = {module: [] for module in modules}
    runs: dict[str, list[float]] = {module: [] for module in modules}
    for result in [*answered, *dropped]:
        for task in result.tasks:
            if task.module not in modules:
                continue
            if task.status == "dropped":
                modules[task.module]["dropped"] += 1
                continue
            took = task.finished_at - task.enqueued_at
            per_module[task.module].append(took)
            bound = _bound(planned_at, task.module, task.enqueued_at, task.finished_at)
            if took > (modules[task.module]["planned_worst_s"] if bound is None else bound) + 1e-9:
                modules[task.module]["over_plan"] += 1
            waits[task.module].append(task.started_at - task.enqueued_at)
            runs[task.module].append(task.finished_at - task.started_at)
    for module, busy_s in _device_seconds([*answered, *dropped], plan).items():
        machines = modules[module]["machines"]
        if window_s and window_s > 0 and machines:
            modules[module]["device_occupancy_measured"] = busy_s / (machines * window_s)
    for module, xs in per_module.items():
        modules[module]["tasks"] = len(xs)
        if xs:
            modules[module]["measured_worst_s"] = max(xs)
            modules[module]["measured_p99_s"] = percentile(xs, 99)
        if waits[module]:
            modules[module]["wait_worst_s"] = max(waits[module])
            modules[module]["run_worst_s"] = max(runs[module])
    return {
        "frames_sent": sent,
        "answered": len(answered),
        "dropped": len(dropped),
        "lost": lost,
        "slo_s": slo_s,
        "slo_attainment": within / len(lat) if lat else math.nan,
        "latency_p50_s": percentile(lat, 50),
        "latency_p95_s": percentile(lat, 95),
        "latency_p99_s": percentile(lat, 99),
        "latency_max_s": max(lat) if lat else math.nan,
        "modules": modules,
        "planned_billed_per_hour": plan.billed_per_hour,
        "planned_occupancy_per_hour": plan.cost_per_hour,
        "dispatch_realised": bool(extra.get("dispatch_realised")),
        "plain_billed_per_hour": extra.get("plain_billed_per_hour"),
        "price_of_realisability": extra.get("price_of_realisability"),
        "emulated_hardware": list(emulated_hardware),
    }


def _device_seconds(results: Sequence[ResultOut], plan: Plan) -> dict[str, float]:
    """Per module, the device-seconds its batches took: each batch once (its tasks share their
    hardware, ``device_at`` and ``finished_at``), a concurrency-c batch counted as 1/c of a device."""
    batches: dict[str, set[tuple[str, float, float]]] = {}
    for result in results:
        for task in result.tasks:
            if task.status == "done" and task.device_at is not None and task.module in plan.modules:
                batches.setdefault(task.module, set()).add((task.hardware, task.device_at, task.finished_at))
    out: dict[str, float] = {}
    for module, seen in batches.items():
        conc = {group.hardware: group.concurrency for group in plan.modules[module].groups}
        out[module] = sum((done - began) / conc.get(hw, 1) for hw, began, done in seen)
    return out


def aws_request_figures(
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    frames: int,
    seconds: float,
    since: float | None = None,
) -> dict[str, Any] | None:
    """The AWS requests the stack made between two meter readings (moto's
    ``/_skinflint/requests``): total, per frame sent, per second, and by ``service.action`` (most
    first); the server's CPU on them (total, per request, and by action, most first) and the heavy
    requests (at least 20 ms of the server's CPU each) and the server's garbage-collector pauses of at
    least 10 ms (``[started_at, generation, seconds, collected]``) that started at or after ``since``,
    and its collections per generation between the readings. Every
    process counts: the front, the workers, the control loop, the fleet emulator; ``by_caller_per_frame``
    splits the requests per frame by the process that made them (``front``, ``instance-<hardware>``,
    ``stack``: the control loop and the fleet emulator; the meter's ``by_caller``) and action. None
    when either reading is missing."""
    if before is None or after is None:
        return None
    was = before.get("by_action", {})
    by_action = {
        action: int(count) - int(was.get(action, 0)) for action, count in after.get("by_action", {}).items()
    }
    by_action = dict(
        sorted(
            ((action, count) for action, count in by_action.items() if count > 0),
            key=lambda kv: (-kv[1], kv[0]),
        )
    )
    emulated = {action: count for action, count in by_action.items() if action.startswith(EMULATION_PREFIX)}
    by_action = {action: count for action, count in by_action.items() if action not in emulated}
    total = sum(by_action.values())
    cpu_was = before.get("cpu_s_by_action", {})
    cpu = {
        action: float(seconds) - float(cpu_was.get(action, 0.0))
        for action, seconds in after.get("cpu_s_by_action", {}).items()
    }
    cpu = dict(
        sorted(
            ((action, seconds) for action, seconds in cpu.items() if seconds > 0),
            key=lambda kv: (-kv[1], kv[0]),
        )
    )
    heavy = [entry for entry in after.get("heavy", []) if since is None or float(entry[0]) >= since]
    gc_after, gc_before = after.get("gc") or {}, before.get("gc") or {}
    was_gen = gc_before.get("by_generation", {})
    gc_figures = {
        "collections": {
            generation: int(figures["collections"]) - int(was_gen.get(generation, {}).get("collections", 0))
            for generation, figures in gc_after.get("by_generation", {}).items()
        },
        "long_pauses": [
            pause for pause in gc_after.get("long_pauses", []) if since is None or float(pause[0]) >= since
        ],
    }
    cpu_total = sum(cpu.values())
    callers_was = before.get("by_caller") or {}
    by_caller: dict[str, dict[str, float]] = {}
    for who, seen in sorted((after.get("by_caller") or {}).items()):
        was_seen = callers_was.get(who, {})
        counts = {
            action: int(count) - int(was_seen.get(action, 0))
            for action, count in seen.items()
            if not action.startswith(EMULATION_PREFIX)
        }
        counts = {action: count for action, count in counts.items() if count > 0}
        if counts and frames:
            by_caller[who] = {
                "total": sum(counts.values()) / frames,
                **{
                    action: count / frames
                    for action, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
                },
            }
    billing_was = before.get("billing") or {}
    billing = {
        unit: round(float(value) - float(billing_was.get(unit, 0.0)), 3)
        for unit, value in (after.get("billing") or {}).items()
    }
    return {
        "total": total,
        # what AWS would bill for them, estimated by the server's meter (moto_server.billing_units)
        "billing_units": billing,
        "billing_units_per_frame": {unit: value / frames for unit, value in billing.items()}
        if frames
        else {},
        "per_frame": total / frames if frames else math.nan,
        "per_second": total / seconds if seconds > 0 else math.nan,
        "seconds": seconds,
        "by_action": by_action,
        # requests per frame by process and action (the meter's by_caller: the SDK's app id)
        "by_caller_per_frame": by_caller,
        # the stand-ins for what AWS does by itself (the EMF extraction): not in the figures above
        "emulation_by_action": emulated,
        "server_cpu_s": cpu_total,
        "server_cpu_ms_per_request": 1e3 * cpu_total / total if total else math.nan,
        "server_cpu_s_by_action": cpu,
        "heavy_requests": heavy,
        "server_gc": gc_figures,
        "server_maxrss_mb": after["maxrss_kb"] / 1024 if "maxrss_kb" in after else None,
    }


#: billing unit -> (service, unit) of its price in profiles/aws_prices.json; the client's API requests
#: are each an HTTP API request and a front Lambda invocation
_UNIT_PRICES: dict[str, tuple[tuple[str, str], ...]] = {
    "dynamodb_write_units": (("dynamodb", "WriteRequestUnits"),),
    "dynamodb_read_units_strong": (("dynamodb", "ReadRequestUnits"),),
    "dynamodb_read_units_eventual": (("dynamodb", "ReadRequestUnits"),),  # already halved by the meter
    "sqs_billed_requests": (("sqs", "Requests"),),
    "s3_put_requests": (("s3", "PutClassRequests"),),
    "s3_get_requests": (("s3", "GetClassRequests"),),
    "api_requests_post": (("apigateway", "HttpApiRequests"), ("lambda", "Requests")),
    "api_requests_get": (("apigateway", "HttpApiRequests"), ("lambda", "Requests")),
}
NOT_PRICED = (
    "the front Lambda's duration, logs and metrics, storage, the fixed monthly items (alarms, "
    "dashboard, instance disks): docs/cost.md models them"
)


def all_in_figures(
    units_per_frame: dict[str, float], frame_rate: float, fleet_per_hour: float, prices: Any
) -> dict[str, Any]:
    """The demo's all-in cost: the EC2 fleet's $/h plus the data plane's, priced from the billing
    units per frame the stack was measured to make (``aws_requests.billing_units_per_frame``) at the
    offered ``frame_rate``, per service; ``prices``: :class:`profiles.aws_prices.AwsPrices`."""
    per_frame: dict[str, float] = {}
    for unit, amount in units_per_frame.items():
        for service, price_unit in _UNIT_PRICES.get(unit, ()):
            per_frame[service] = per_frame.get(service, 0.0) + prices.require(service, price_unit).cost(
                amount
            )
    frames_per_hour = frame_rate * 3600.0
    data_plane = {service: usd * frames_per_hour for service, usd in sorted(per_frame.items())}
    total = fleet_per_hour + sum(data_plane.values())
    return {
        "fleet_per_hour": fleet_per_hour,
        "data_plane_per_hour": sum(data_plane.values()),
        "data_plane": data_plane,
        "all_in_per_hour": total,
        "all_in_per_million_frames": total / frames_per_hour * 1e6 if frames_per_hour > 0 else math.nan,
        "prices": f"{prices.label} ({prices.source}); EC2: profiles/hardware.json",
        "not_priced": NOT_PRICED,
    }


def task_rows(
    results: Sequence[ResultOut | None],
    planned_at: Callable[[str, float], float | None] | None = None,
) -> list[dict[str, Any]]:
    """One row per task of every answered or dropped frame (what ``skinflint demo`` writes to
    ``tasks.jsonl`` in its log directory): the request, module, hardware, batch size, enqueue /
    start / finish / record times, queue wait, run time, the planned worst case it was held to and whether it
    was over it."""
    rows: list[dict[str, Any]] = []
    for result in results:
        if result is None or result.status == "queued":
            continue
        for task in result.tasks:
            row: dict[str, Any] = {
                "request_id": result.request_id,
                "module": task.module,
                "status": task.status,
                "hardware": task.hardware,
                "emulated": task.emulated,
                "batch_size": task.batch_size,
                "enqueued_at": task.enqueued_at,
                "started_at": task.started_at,
                "finished_at": task.finished_at,
                "received_at": task.received_at,
                "device_at": task.device_at,
                # when its record was written (a terminal task; an ancestor: when its children were
                # sent), and how long after its finish: the record linger's part of the latency
                "recorded_at": task.recorded_at,
                "record_s": None if task.recorded_at is None else task.recorded_at - task.finished_at,
            }
            if task.status == "done":
                took = task.finished_at - task.enqueued_at
                bound = _bound(planned_at, task.module, task.enqueued_at, task.finished_at)
                row.update(
                    took_s=took,
                    wait_s=task.started_at - task.enqueued_at,
                    # of the wait: until the worker had the message (SQS, the sender's write and
                    # send), then held in the worker (window, grace, batches ahead of it)
                    delivery_s=None if task.received_at is None else task.received_at - task.enqueued_at,
                    held_s=None if task.received_at is None else task.started_at - task.received_at,
                    run_s=task.finished_at - task.started_at,
                    # of the run: the batch's time on the device (before it: its inputs' preparation
                    # still pending at the window's close, and the wait for the device)
                    device_s=None if task.device_at is None else task.finished_at - task.device_at,
                    planned_worst_s=bound,
                    over_plan=bound is not None and took > bound + 1e-9,
                )
            rows.append(row)
    return rows
