"""Routing helpers and the demo summary: pure, no AWS."""

from __future__ import annotations

import math

import pytest

from core.routing import child_count, child_region
from core.schema import ResultOut, TaskOut
from planner.models import MachineGroup, ModulePlan, Plan
from skinflint.local.summary import percentile, summarise, task_rows


@pytest.mark.parametrize("fan_out", [0.5, 1.0, 1.5, 2.0, 2.5])
def test_child_count_is_floor_or_ceil_and_averages_the_fan_out(fan_out):
    counts = [child_count(f"req{i}/detector", "car", fan_out) for i in range(4000)]
    assert set(counts) <= {math.floor(fan_out), math.ceil(fan_out)}
    assert sum(counts) / len(counts) == pytest.approx(fan_out, abs=0.03)


def test_child_count_and_region_are_deterministic():
    assert child_count("a/b", "c", 1.5) == child_count("a/b", "c", 1.5)
    box = child_region("a/b", "c", 0)
    assert box == child_region("a/b", "c", 0)
    assert 0 <= box[0] < box[2] <= 1 and 0 <= box[1] < box[3] <= 1


def test_percentile_nearest_rank():
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0
    assert percentile(list(range(1, 101)), 99) == 99
    assert math.isnan(percentile([], 50))


def _task(module: str, enq: float, fin: float, status: str = "done") -> TaskOut:
    return TaskOut(
        task_id=module, module=module, status=status, hardware="t4", emulated=True,
        enqueued_at=enq, started_at=enq, finished_at=fin, batch_size=1,
    )  # fmt: skip


def test_summary_counts_answered_dropped_lost_and_module_worst_cases():
    plan = Plan(
        objective="billed",
        cost_per_hour=0.5,
        billed_per_hour=0.526,
        solve_ms=1.0,
        modules={
            "det": ModulePlan(
                latency_budget_s=0.2,
                worst_case_latency_s=0.15,
                groups=[
                    MachineGroup(hardware="t4", batch=1, machines=1, rate_per_machine=10, duration_s=0.05)
                ],
            )
        },
    )
    ok = ResultOut(
        request_id="a",
        app="x",
        status="done",
        accepted_at=0,
        deadline=1,
        finished_at=0.1,
        latency_s=0.1,
        tasks=[_task("det", 0, 0.1)],
    )
    slow = ResultOut(
        request_id="b",
        app="x",
        status="done",
        accepted_at=0,
        deadline=1,
        finished_at=0.3,
        latency_s=0.3,
        tasks=[_task("det", 0, 0.12)],
    )
    dropped = ResultOut(
        request_id="c",
        app="x",
        status="dropped",
        accepted_at=0,
        deadline=1,
        tasks=[_task("det", 0, 0, "dropped")],
    )
    queued = ResultOut(request_id="d", app="x", status="queued", accepted_at=0, deadline=1)
    s = summarise(5, [ok, slow, dropped, queued, None], plan, slo_s=0.25, emulated_hardware=["t4"])
    # sent 5: 2 answered, 1 dropped (reported), 2 lost (one still queued, one never accepted)
    assert (s["answered"], s["dropped"], s["lost"]) == (2, 1, 2)
    assert s["slo_attainment"] == 0.5  # 0.1 <= 0.25, 0.3 > 0.25
    m = s["modules"]["det"]
    assert m["measured_worst_s"] == 0.12 and m["planned_worst_s"] == 0.15 and m["dropped"] == 1
    assert m["hardware"] == ["t4 (emulated)"] and m["emulated"]
    assert m["over_plan"] == 0
    # held to the version serving at the time: 0.11 s allowed until t = 0.05, 0.2 s from then on;
    # the 0.12 s task straddles the change (held to the looser figure), the 0.1 s one is within
    s = summarise(
        5,
        [ok, slow],
        plan,
        slo_s=0.25,
        emulated_hardware=["t4"],
        planned_at=lambda _m, t: 0.11 if t < 0.05 else 0.2,
    )
    assert s["modules"]["det"]["over_plan"] == 0
    s = summarise(5, [ok, slow], plan, slo_s=0.25, emulated_hardware=["t4"], planned_at=lambda _m, t: 0.11)
    assert s["modules"]["det"]["over_plan"] == 1
    # the per-task rows the demo writes agree with the summary (queued and never-accepted: no rows)
    rows = task_rows([ok, slow, dropped, queued, None], planned_at=lambda _m, t: 0.11)
    assert [(r["request_id"], r["status"], r.get("over_plan")) for r in rows] == [
        ("a", "done", False),
        ("b", "done", True),
        ("c", "dropped", None),
    ]
    assert rows[1]["took_s"] == 0.12 and rows[1]["planned_worst_s"] == 0.11


def test_summary_gives_each_modules_device_occupancy_planned_and_measured():
    # GIVEN a plan of 2 t4 machines of concurrency 2, batch 4, 8 req/s each, 0.1 s a batch, 4 of the
    # 16 req/s dummy load: (16 - 4) / 16 x 8 / 4 x 0.1 / 2 = 7.5 % of each device, as planned
    plan = Plan(
        objective="billed", cost_per_hour=1.0, billed_per_hour=1.0, solve_ms=1.0,
        modules={
            "det": ModulePlan(
                latency_budget_s=0.5, worst_case_latency_s=0.4, dummy_rate=4.0,
                groups=[MachineGroup(hardware="t4", batch=4, concurrency=2, machines=2,
                                     rate_per_machine=8, duration_s=0.1)],
            )
        },
    )  # fmt: skip

    def task(rid: str, device_at: float, fin: float) -> TaskOut:
        return TaskOut(
            task_id="det", module="det", status="done", hardware="t4", emulated=True,
            enqueued_at=0, started_at=device_at - 0.01, device_at=device_at, finished_at=fin, batch_size=2,
        )  # fmt: skip

    # two batches: frames a and b share the first (0.1 s on the device), c is alone in the second (0.2 s)
    results = [
        ResultOut(request_id=rid, app="x", status="done", accepted_at=0, deadline=9, tasks=[task(rid, d, f)])
        for rid, d, f in (("a", 1.0, 1.1), ("b", 1.0, 1.1), ("c", 2.0, 2.2))
    ]
    s = summarise(3, results, plan, slo_s=9, emulated_hardware=["t4"], window_s=10.0)
    m = s["modules"]["det"]
    assert m["device_occupancy_planned"] == pytest.approx(0.075)
    # (0.1 + 0.2) / concurrency 2 = 0.15 device-s over 2 machines x 10 s
    assert m["device_occupancy_measured"] == pytest.approx(0.15 / 20)
    # without the stream's length there is nothing to measure it against
    assert (
        summarise(3, results, plan, slo_s=9, emulated_hardware=["t4"])["modules"]["det"][
            "device_occupancy_measured"
        ]
        is None
    )
    assert [row["device_s"] for row in task_rows(results)] == pytest.approx([0.1, 0.1, 0.2])
