"""The demo's summary, computed from the results the API returned (pure: no I/O)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from skinflint.local.moto_server import EMULATION_PREFIX

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from core.schema import ResultOut
    from planner.models import ModulePlan, Plan

__all__ = ["aws_request_figures", "percentile", "summarise", "task_rows"]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]); NaN for no values."""
    if not values:
        return math.nan
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


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
    figures = [x for x in (planned_at(module, t0), planned_at(module, t1)) if x is not None]
    return max(figures) if figures else None


def summarise(
    sent: int,
    results: Sequence[ResultOut | None],
    plan: Plan,
    slo_s: float,
    emulated_hardware: Sequence[str],
    planned_at: Callable[[str, float], float | None] | None = None,
) -> dict[str, Any]:
    """``results[i]`` is the last answer for frame i (None when the front never accepted it).
    ``planned_at(module, t)``: the module's planned worst case in the plan version serving at ``t``;
    a task is *over plan* when it took longer than that at both its enqueue and its finish time
    (a task that straddles a version change is held to the looser of the two). Without it, every
    task is held to ``plan``'s figure."""
    extra = plan.model_extra or {}
    answered = [r for r in results if r is not None and r.status == "done"]
    dropped = [r for r in results if r is not None and r.status == "dropped"]
    lost = sent - len(answered) - len(dropped)
    lat = [r.latency_s for r in answered if r.latency_s is not None]
    within = sum(1 for x in lat if x <= slo_s)
    modules: dict[str, dict[str, Any]] = {}
    for name, mp in plan.modules.items():
        hw = sorted({g.hardware for g in mp.groups})
        modules[name] = {
            "hardware": [f"{h} (emulated)" if h in emulated_hardware else h for h in hw],
            "machines": sum(g.machines for g in mp.groups),
            "batch": [g.batch for g in mp.groups],
            "planned_worst_s": mp.worst_case_latency_s,
            "measured_worst_s": None,
            "measured_p99_s": None,
            "wait_worst_s": None,
            "run_worst_s": None,
            "over_plan": 0,
            "tasks": 0,
            "dropped": 0,
            "emulated": any(h in emulated_hardware for h in hw),
            **_dispatch_figures(mp),
        }
    per_module: dict[str, list[float]] = {m: [] for m in modules}
    waits: dict[str, list[float]] = {m: [] for m in modules}
    runs: dict[str, list[float]] = {m: [] for m in modules}
    for r in [*answered, *dropped]:
        for t in r.tasks:
            if t.module not in modules:
                continue
            if t.status == "dropped":
                modules[t.module]["dropped"] += 1
                continue
            took = t.finished_at - t.enqueued_at
            per_module[t.module].append(took)
            bound = _bound(planned_at, t.module, t.enqueued_at, t.finished_at)
            if took > (modules[t.module]["planned_worst_s"] if bound is None else bound) + 1e-9:
                modules[t.module]["over_plan"] += 1
            waits[t.module].append(t.started_at - t.enqueued_at)
            runs[t.module].append(t.finished_at - t.started_at)
    for m, xs in per_module.items():
        modules[m]["tasks"] = len(xs)
        if xs:
            modules[m]["measured_worst_s"] = max(xs)
            modules[m]["measured_p99_s"] = percentile(xs, 99)
        if waits[m]:
            modules[m]["wait_worst_s"] = max(waits[m])
            modules[m]["run_worst_s"] = max(runs[m])
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
    process counts: the front, the workers, the control loop, the fleet emulator. None when either
    reading is missing."""
    if before is None or after is None:
        return None
    was = before.get("by_action", {})
    by_action = {k: int(v) - int(was.get(k, 0)) for k, v in after.get("by_action", {}).items()}
    by_action = dict(sorted(((k, v) for k, v in by_action.items() if v > 0), key=lambda kv: (-kv[1], kv[0])))
    emulated = {k: v for k, v in by_action.items() if k.startswith(EMULATION_PREFIX)}
    by_action = {k: v for k, v in by_action.items() if k not in emulated}
    total = sum(by_action.values())
    cpu_was = before.get("cpu_s_by_action", {})
    cpu = {k: float(v) - float(cpu_was.get(k, 0.0)) for k, v in after.get("cpu_s_by_action", {}).items()}
    cpu = dict(sorted(((k, v) for k, v in cpu.items() if v > 0), key=lambda kv: (-kv[1], kv[0])))
    heavy = [h for h in after.get("heavy", []) if since is None or float(h[0]) >= since]
    gc_after, gc_before = after.get("gc") or {}, before.get("gc") or {}
    was_gen = gc_before.get("by_generation", {})
    gc_figures = {
        "collections": {
            g: int(v["collections"]) - int(was_gen.get(g, {}).get("collections", 0))
            for g, v in gc_after.get("by_generation", {}).items()
        },
        "long_pauses": [p for p in gc_after.get("long_pauses", []) if since is None or float(p[0]) >= since],
    }
    cpu_total = sum(cpu.values())
    return {
        "total": total,
        "per_frame": total / frames if frames else math.nan,
        "per_second": total / seconds if seconds > 0 else math.nan,
        "seconds": seconds,
        "by_action": by_action,
        # the stand-ins for what AWS does by itself (the EMF extraction): not in the figures above
        "emulation_by_action": emulated,
        "server_cpu_s": cpu_total,
        "server_cpu_ms_per_request": 1e3 * cpu_total / total if total else math.nan,
        "server_cpu_s_by_action": cpu,
        "heavy_requests": heavy,
        "server_gc": gc_figures,
        "server_maxrss_mb": after["maxrss_kb"] / 1024 if "maxrss_kb" in after else None,
    }


def task_rows(
    results: Sequence[ResultOut | None],
    planned_at: Callable[[str, float], float | None] | None = None,
) -> list[dict[str, Any]]:
    """One row per task of every answered or dropped frame (what ``skinflint demo`` writes to
    ``tasks.jsonl`` in its log directory): the request, module, hardware, batch size, enqueue /
    start / finish times, queue wait, run time, the planned worst case it was held to and whether it
    was over it."""
    rows: list[dict[str, Any]] = []
    for r in results:
        if r is None or r.status == "queued":
            continue
        for t in r.tasks:
            row: dict[str, Any] = {
                "request_id": r.request_id,
                "module": t.module,
                "status": t.status,
                "hardware": t.hardware,
                "emulated": t.emulated,
                "batch_size": t.batch_size,
                "enqueued_at": t.enqueued_at,
                "started_at": t.started_at,
                "finished_at": t.finished_at,
                "received_at": t.received_at,
            }
            if t.status == "done":
                took = t.finished_at - t.enqueued_at
                bound = _bound(planned_at, t.module, t.enqueued_at, t.finished_at)
                row.update(
                    took_s=took,
                    wait_s=t.started_at - t.enqueued_at,
                    # of the wait: until the worker had the message (SQS, the sender's write and
                    # send), then held in the worker (window, grace, batches ahead of it)
                    delivery_s=None if t.received_at is None else t.received_at - t.enqueued_at,
                    held_s=None if t.received_at is None else t.started_at - t.received_at,
                    run_s=t.finished_at - t.started_at,
                    planned_worst_s=bound,
                    over_plan=bound is not None and took > bound + 1e-9,
                )
            rows.append(row)
    return rows
