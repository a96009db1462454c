"""Pure parts of the versioned plan store and of what a version holds: document chunking, the
serving version, slot content, queue names, module-plan change detection, rate windows."""

from __future__ import annotations

import hashlib

import pytest

from control.deployments import app_change, same_module_plan
from control.queues import queue_name
from control.spec import RegistrationSpec
from core.adapters.plan_store import INLINE_LIMIT, AppEntry, Manifest, PlanStore, slot_content
from core.adapters.rates import RateWindow
from core.schema import Deployment
from planner.models import AppModuleSpec, MachineGroup, ModulePlan, Plan
from planner.packing import Instance, Share


def test_small_documents_stay_inline_large_ones_are_split_with_a_checksum() -> None:
    (head,) = PlanStore._doc_items("k", "x" * 10)
    assert head["parts"] == {"N": "0"} and head["doc"] == {"S": "x" * 10}
    text = "é" * INLINE_LIMIT  # 2 bytes each: 2 * INLINE_LIMIT bytes -> exactly 2 parts
    items = PlanStore._doc_items("k", text)
    assert [i["pk"]["S"] for i in items] == ["k", "k#p0", "k#p1"]
    assert items[0]["parts"] == {"N": "2"} and "doc" not in items[0]
    assert items[0]["sha256"]["S"] == hashlib.sha256(text.encode()).hexdigest()
    assert b"".join(i["data"]["B"] for i in items[1:]).decode() == text
    assert all(len(i["data"]["B"]) <= INLINE_LIMIT for i in items[1:])  # under DynamoDB's 400 KB


@pytest.mark.parametrize(
    ("now", "previous", "serving"),
    [
        (99.0, 6, 6),  # before activation: the previous version
        (100.0, 6, 7),  # at activation: the new one
        (99.0, None, 7),  # the first version serves at once
    ],
)
def test_the_front_serves_the_previous_version_until_activation(
    now: float, previous: int | None, serving: int
) -> None:
    m = Manifest(
        version=7,
        created_at=85.0,
        activate_at=100.0,
        reason="t",
        previous=previous,
        apps={"a": AppEntry(sha256="0", frame_rate=1.0)},
    )
    assert m.serving(now) == serving


def _share(module: str, machine: int, batch: int = 2) -> Share:
    return Share(
        app="a",
        module=module,
        group=0,
        machine=machine,
        hardware="t4",
        batch=batch,
        concurrency=1,
        duration_s=0.01,
        rate=1.0,
        occupancy=0.1,
    )


def test_slot_content_ignores_which_machine_but_not_what_is_loaded() -> None:
    one = Instance(slot="t4/0", hardware="t4", shares=[_share("det", 0), _share("cls", 1)])
    same = Instance(slot="t4/5", hardware="t4", shares=[_share("cls", 3), _share("det", 2)])
    other = Instance(slot="t4/0", hardware="t4", shares=[_share("det", 0, batch=4), _share("cls", 1)])
    assert slot_content(one) == slot_content(same)
    assert slot_content(one) != slot_content(other)


def test_queue_names_carry_the_version_and_fit_sqs() -> None:
    assert queue_name("traffic", "detector", 0, 1) == "skinflint-traffic-detector-g0-m1"
    assert queue_name("traffic", "detector", 2, 3, version=12) == "skinflint-traffic-detector-v12-g2-m3"
    long = queue_name("a" * 24, "b" * 24, 10, 99, version=12345678)
    assert len(long) <= 80 and long.startswith("skinflint-") and long.endswith("-v12345678-g10-m99")
    assert long != queue_name("a" * 24, "b" * 23 + "c", 10, 99, version=12345678)


def _mp(rate: float, machines: int = 2, budget: float = 0.3) -> ModulePlan:
    return ModulePlan(
        latency_budget_s=budget,
        worst_case_latency_s=0.2,
        groups=[
            MachineGroup(hardware="t4", batch=4, machines=machines, rate_per_machine=rate, duration_s=0.02)
        ],
    )


def test_module_plan_change_detection() -> None:
    assert same_module_plan(_mp(10.0), _mp(10.0 * (1 + 1e-12)))
    assert not same_module_plan(_mp(10.0), _mp(10.5))
    assert not same_module_plan(_mp(10.0), _mp(10.0, machines=3))
    assert not same_module_plan(_mp(10.0), _mp(10.0, budget=0.25))


def test_app_change_names_changed_modules_and_other_differences() -> None:
    spec = RegistrationSpec(
        name="a",
        slo_s=0.5,
        rate=10.0,
        edges=[("det", "cls", 2.0)],
        modules={"det": AppModuleSpec(model="d"), "cls": AppModuleSpec(model="c")},
    )
    plan = Plan(
        objective="billed",
        cost_per_hour=1.0,
        billed_per_hour=1.0,
        solve_ms=0.1,
        modules={"det": _mp(10.0), "cls": _mp(20.0)},
    )
    prev = Deployment(
        app="a",
        version=3,
        origin_s=0.0,
        slo_s=0.5,
        frame_rate=11.0,
        roots=["det"],
        edges=[("det", "cls", 2.0)],
        plan=plan,
        queues={"det": {}, "cls": {}},
    )
    assert not app_change(spec, plan, 11.0, prev, emulated=[], overhead_s=0.0).changed
    new = plan.model_copy(update={"modules": {"det": _mp(10.0), "cls": _mp(25.0)}})
    ch = app_change(spec, new, 12.0, prev, emulated=[], overhead_s=0.0)
    assert ch.changed_modules == ["cls"] and ch.other == ["rate"]
    first = app_change(spec, plan, 11.0, None, emulated=[], overhead_s=0.0)
    assert first.changed_modules == ["det", "cls"] and first.other == ["new app"]


def test_an_unchanged_plan_is_not_republished_for_rate_jitter() -> None:
    spec = RegistrationSpec(
        name="a", slo_s=0.5, rate=10.0, edges=[], modules={"det": AppModuleSpec(model="d")}
    )
    plan = Plan(
        objective="billed", cost_per_hour=1.0, billed_per_hour=1.0, solve_ms=0.1, modules={"det": _mp(10.0)}
    )
    prev = Deployment(
        app="a", version=3, origin_s=0.0, slo_s=0.5, frame_rate=10.0, roots=["det"], edges=[], plan=plan,
        queues={"det": {}},
    )  # fmt: skip
    # Same machines, rate within 10 %: no new version. Beyond 10 %: the admission limit must follow.
    assert not app_change(spec, plan, 10.9, prev, emulated=[], overhead_s=0.0).changed
    assert not app_change(spec, plan, 9.1, prev, emulated=[], overhead_s=0.0).changed
    assert app_change(spec, plan, 11.5, prev, emulated=[], overhead_s=0.0).other == ["rate"]


@pytest.mark.parametrize(
    ("now", "window", "period", "start", "end"),
    [
        (1000.0, 60, 60, 900, 960),  # the last whole minute that ended by 1000
        (1000.0, 90, 60, 840, 960),  # 90 s -> two whole minutes
        (1000.0, 5, 60, 900, 960),  # never less than one period
        (1000.0, 20, 10, 980, 1000),  # 10 s periods (local stack)
    ],
)
def test_rate_windows_cover_whole_periods(
    now: float, window: float, period: int, start: int, end: int
) -> None:
    w = RateWindow(now, window, period)
    assert (w.start, w.end, w.seconds) == (start, end, end - start)


@pytest.mark.parametrize(
    ("now", "lag", "start", "end"),
    [
        (1001.0, 2.5, 985, 995),  # 1001 - 2.5 = 998.5: the periods that ended by 995
        (1003.0, 2.5, 990, 1000),  # 1000.5: 1000 is whole and flushed
        (1000.0, 0.0, 990, 1000),
    ],
)
def test_rate_windows_end_a_flush_lag_before_now(now: float, lag: float, start: int, end: int) -> None:
    w = RateWindow(now, 10, 5, lag)
    assert (w.start, w.end, w.lag_s) == (start, end, lag)


@pytest.mark.parametrize(("window", "period", "lag"), [(10, 0, 0.0), (10, 5, -1.0), (-1, 5, 0.0)])
def test_rate_windows_refuse_bad_settings(window: float, period: int, lag: float) -> None:
    with pytest.raises(ValueError, match="bad rate window"):
        RateWindow(1000.0, window, period, lag)
