"""The cost report against moto's CloudWatch and config table: worker metrics with one plan
version, instance metrics with versioned fleet plans, and the CLI (JSON, plots, HTML) on moto's
server."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from core.adapters.metrics import CloudWatchMetrics
from core.adapters.outcomes import bucket_label
from core.adapters.plan_store import PlanStore
from core.adapters.results import TaskRecord
from core.settings import DataPlaneConfig
from planner.models import AppModuleSpec, AppSpec, MachineGroup, ModulePlan, Plan
from planner.packing import FleetPlan, Instance, Share
from skinflint.local.provision import create_base
from skinflint.report import collect_report
from tests.functional._deploy import publish_app

pytestmark = pytest.mark.functional

PRICES = {"t4": 0.6, "cpu": 0.4}  # USD/h, round numbers for the hand arithmetic
P = 60  # s per period
APP = AppSpec(
    name="traffic",
    slo_s=0.5,
    modules={"detector": AppModuleSpec(model="det"), "car": AppModuleSpec(model="car")},
    edges=[("detector", "car", 1.0)],
)


def plan() -> Plan:
    # detector: 1 t4 machine; car: 2 cpu machines (concurrency 2) -> billed 0.6 + 2 x 0.4 = 1.4 USD/h
    return Plan(
        objective="billed",
        cost_per_hour=0.7,
        billed_per_hour=1.4,
        solve_ms=0.0,
        modules={
            "detector": ModulePlan(
                latency_budget_s=0.25,
                worst_case_latency_s=0.2,
                groups=[
                    MachineGroup(hardware="t4", batch=2, machines=1, rate_per_machine=10.0, duration_s=0.1)
                ],
            ),
            "car": ModulePlan(
                latency_budget_s=0.25,
                worst_case_latency_s=0.2,
                groups=[
                    MachineGroup(
                        hardware="cpu",
                        batch=1,
                        concurrency=2,
                        machines=2,
                        rate_per_machine=10.0,
                        duration_s=0.1,
                    )
                ],
            ),
        },
    )


def put(cw, name: str, t: float, value: float, n: int = 1, unit: str = "Count", **dims: str) -> None:
    cw.put_metric_data(
        Namespace="Skinflint",
        MetricData=[
            {
                "MetricName": name,
                "Dimensions": [{"Name": k, "Value": v} for k, v in dims.items()],
                "Timestamp": dt.datetime.fromtimestamp(t, dt.UTC),
                "Unit": unit,
                "StatisticValues": {
                    "SampleCount": n,
                    "Sum": value,
                    "Minimum": 0.0,
                    "Maximum": value / max(n, 1),
                },
            }
        ],
    )


def worker_metrics(cw, start: float, periods: int) -> None:
    """What the front and the workers publish for ``periods`` minutes of a steady run."""
    for k in range(periods):
        t = start + k * P + 30
        det = {"App": "traffic", "Module": "detector", "Hardware": "t4"}
        put(cw, "InstanceSeconds", t, 60.0, 12, "Seconds", **det)
        put(cw, "DeviceMs", t, 6_000.0, 60, "Milliseconds", **det)  # 6 s on the device of 60 s: 10 %
        put(cw, "BatchFill", t, 30.0, 60, "None", **det)
        put(cw, "EmptySlots", t, 240.0, **det)
        for m in ("0", "1"):  # the two car machines publish the same series (one per App/Module/Hardware)
            put(cw, "InstanceSeconds", t, 60.0, 12, "Seconds", App="traffic", Module="car", Hardware="cpu")
            put(
                cw,
                "DeviceMs",
                t,
                12_000.0 if m == "0" else 0.0,
                60,
                "Milliseconds",
                App="traffic",
                Module="car",
                Hardware="cpu",
            )
        put(
            cw,
            "ModuleLatencyMs",
            t,
            150.0 * 10,
            10,
            "Milliseconds",
            App="traffic",
            Module="car",
            Hardware="cpu",
        )
        put(cw, "FramesAccepted", t, 10.0, App="traffic")
        put(cw, "FrontRejected", t, 1.0, App="traffic", Reason="over_planned_rate")
        # 10 frames per minute: 9 within the SLO, the 10th at 700 ms (late)
        put(cw, "SloAttainment", t, 9.0, 10, "None", App="traffic")
        put(cw, "EndToEndLatencyMs", t, 9 * 200.0 + 700.0, 10, "Milliseconds", App="traffic")
        put(cw, "EndToEndLatencyBucket", t, 9.0, App="traffic", LeMs=bucket_label(200.0))
        put(cw, "EndToEndLatencyBucket", t, 1.0, App="traffic", LeMs=bucket_label(700.0))


@pytest.fixture
def aws():
    import boto3
    from moto import mock_aws

    with mock_aws():
        cfg = DataPlaneConfig()
        ddb, sqs, s3, cw = (
            boto3.client(s, region_name=cfg.region) for s in ("dynamodb", "sqs", "s3", "cloudwatch")
        )
        create_base(ddb, s3, cfg)
        yield cfg, ddb, sqs, cw


def test_report_from_worker_metrics_and_the_published_plan(aws):
    cfg, ddb, sqs, cw = aws

    start = float(int(time.time()) // P * P - 10 * P)
    # one version, active since before the window: one instance per planned machine
    store = PlanStore(ddb, cfg.config_table)
    publish_app(store, sqs, APP, plan(), 10.0, origin_s=start - 600, activate_at=start - 600, prices=PRICES)
    worker_metrics(cw, start, periods=6)
    r = collect_report(
        cw, ddb, namespace="Skinflint", config_table=cfg.config_table, prices=PRICES,
        start=start, end=start + 6 * P, period_s=P,
    )  # fmt: skip
    f = r["fleet"]
    assert (f["source"], r["plan_source"]) == ("workers", "plan store")
    # 6 periods, the 4 inside are steady: 0.6 x 60/60 + 0.4 x 120/60 = 1.4 USD/h, as planned
    assert (f["active_periods"], f["interior_periods"]) == (6, 4)
    assert f["observed_per_hour_steady"] == pytest.approx(1.4)
    assert f["planned_per_hour_steady"] == pytest.approx(1.4)
    assert f["deviation_steady"] == pytest.approx(0.0, abs=1e-9)
    assert f["instance_seconds"] == {"cpu": 720.0, "t4": 360.0}
    a = r["apps"]["traffic"]
    # billed 1.4 USD/h x 6 min = 0.14 USD for 60 frames: 2.333 USD per 1,000 frames
    assert a["billed_usd"] == pytest.approx(0.14)
    assert a["frames"] == 60 and a["cost_per_1000_frames"] == pytest.approx(0.14 / 60 * 1000)
    assert a["rejected"] == {"over_planned_rate": 6.0}
    assert a["slo_attainment"] == pytest.approx(0.9) and a["frames_completed"] == 60
    assert a["latency_mean_s"] == pytest.approx(0.25)  # (9 x 200 + 700) / 10 ms
    assert (a["latency_p50_le_s"], a["latency_p95_le_s"]) == (0.2, 0.75)
    det, car = a["modules"]["detector @ t4"], a["modules"]["car @ cpu"]
    assert det["occupancy"] == pytest.approx(0.1)  # 36 s busy / 360 s, concurrency 1
    assert car["occupancy"] == pytest.approx(72 / (2 * 720))  # 72 s busy / (concurrency 2 x 720 s)
    # what the plan predicts: 10 req/s / batch 2 x 0.1 s = 0.5; 10 / 1 x 0.1 / concurrency 2 = 0.5
    assert det["planned_occupancy"] == pytest.approx(0.5) and car["planned_occupancy"] == pytest.approx(0.5)
    assert det["batch_fill"] == pytest.approx(0.5)
    assert det["empty_slot_fraction"] == pytest.approx(240 / (240 + 60))
    assert car["latency_max_s"] == pytest.approx(0.15) and car["planned_worst_s"] == 0.2


def _queues(sqs, p: Plan) -> dict[str, dict[str, str]]:
    """One queue per planned machine, with the app's DLQ (as the control loop creates them)."""
    from control.queues import create_module_queues, ensure_app_dlq

    _, dlq_arn = ensure_app_dlq(sqs, "traffic")
    return {m: create_module_queues(sqs, "traffic", m, mp, dlq_arn=dlq_arn) for m, mp in p.modules.items()}


def fleet(instances: int) -> FleetPlan:
    share = Share(
        app="traffic", module="detector", group=0, machine=0, hardware="t4", batch=2, concurrency=1,
        duration_s=0.1, rate=10.0, occupancy=0.5,
    )  # fmt: skip
    return FleetPlan(
        instances=[Instance(slot=f"t4/{i}", hardware="t4", shares=[share]) for i in range(instances)],
        prices={"t4": PRICES["t4"]},
        occupancy_per_hour=0.3 * instances,
        dedicated_per_hour=0.6 * instances,
    )


def test_report_follows_the_plan_versions_and_bills_the_fleets_instances(aws):
    cfg, ddb, sqs, cw = aws
    from core.schema import Deployment

    start = float(int(time.time()) // P * P - 12 * P)
    queues = _queues(sqs, plan())
    dep = Deployment(
        app="traffic", version=1, origin_s=start, slo_s=0.5, frame_rate=10.0, roots=["detector"],
        edges=[("detector", "car", 1.0)], plan=plan(), queues=queues,
    )  # fmt: skip
    store = PlanStore(ddb, cfg.config_table)
    # GIVEN one t4 instance planned for 5 minutes, then two
    store.publish([dep], fleet(1), expected=None, activate_at=start, reason="first")
    store.publish([dep], fleet(2), expected=1, activate_at=start + 5 * P, reason="scale out")
    for k in range(10):
        n = 1 if k < 5 else 2
        for i in range(n):
            put(
                cw, "InstanceSeconds", start + k * P + 20, 60.0, 30, "Seconds", Hardware="t4", State="serving"
            )
            assert i < 2
    r = collect_report(
        cw, ddb, namespace="Skinflint", config_table=cfg.config_table, prices=PRICES,
        start=start, end=start + 10 * P, period_s=P, apps=["traffic"],
    )  # fmt: skip
    f = r["fleet"]
    assert (f["source"], r["plan_source"], r["plan_versions"]) == ("instances", "plan store", [1, 2])
    assert [x["planned_per_hour"] for x in f["timeline"]] == [0.6] * 5 + [1.2] * 5
    assert [x["observed_per_hour"] for x in f["timeline"]] == pytest.approx([0.6] * 5 + [1.2] * 5)
    assert f["deviation_steady"] == pytest.approx(0.0, abs=1e-9)
    assert f["observed_usd"] == pytest.approx(0.6 * 5 / 60 + 1.2 * 5 / 60)
    # the app holds every share of the fleet, so its part of the bill is all of it
    assert r["apps"]["traffic"]["billed_usd"] == pytest.approx(f["observed_usd"])
    assert r["apps"]["traffic"]["planned_billed_per_hour"] == pytest.approx(1.2)


def test_a_version_superseded_before_it_activated_is_not_in_the_plan_history(aws):
    cfg, ddb, sqs, _ = aws
    from core.schema import Deployment
    from skinflint.report.plans import load_plan_history

    start = float(int(time.time()) // P * P - 12 * P)
    queues = _queues(sqs, plan())
    dep = Deployment(
        app="traffic", version=1, origin_s=start, slo_s=0.5, frame_rate=10.0, roots=["detector"],
        edges=[("detector", "car", 1.0)], plan=plan(), queues=queues,
    )  # fmt: skip
    store = PlanStore(ddb, cfg.config_table)
    store.publish([dep], fleet(1), expected=None, activate_at=start, reason="first")
    # GIVEN v2 waiting for its slots (its activation far ahead) when v3 replaces it
    store.publish([dep], fleet(3), expected=1, activate_at=time.time() + 3600, reason="waiting")
    v3 = store.publish([dep], fleet(2), expected=2, activate_at=start + 5 * P, reason="replaces v2")
    # THEN v3 follows v1, and the report never bills v2's fleet
    assert v3.previous == 1
    history = load_plan_history(ddb, cfg.config_table)
    assert [v.version for v in history.versions] == [1, 3]


def test_the_cli_reads_moto_and_writes_json_plots_and_html(tmp_path, capsys, moto_url):
    import boto3

    from skinflint.cli import main
    from skinflint.local.stack import free_port

    url = moto_url
    cfg = DataPlaneConfig(endpoint_url=url)
    ddb, sqs = (boto3.client(s, region_name="us-east-1", endpoint_url=url) for s in ("dynamodb", "sqs"))
    now = time.time()
    store = PlanStore(ddb, cfg.config_table)
    publish_app(store, sqs, APP, plan(), 10.0, origin_s=now - 600, activate_at=now - 600, prices=PRICES)
    # the data plane's own metrics path: aggregated values flushed by CloudWatchMetrics
    metrics = CloudWatchMetrics(
        boto3.client("cloudwatch", region_name="us-east-1", endpoint_url=url), "Skinflint"
    )
    metrics.put("FramesAccepted", 3, App="traffic")
    metrics.put("SloAttainment", 1.0, "None", App="traffic")
    metrics.put("InstanceSeconds", 5.0, "Seconds", App="traffic", Module="detector", Hardware="t4")
    metrics.flush()
    rc = main(
        ["report", "--endpoint", url, "--since", "10m", "--json", "--plots", str(tmp_path / "plots"),
         "--html", str(tmp_path / "r.html")]
    )  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    bad = main(["report", "--endpoint", f"http://127.0.0.1:{free_port()}", "--since", "1m"])
    assert rc == 0
    a = out["apps"]["traffic"]
    assert a["frames"] == 3 and a["slo_attainment"] == 1.0 and a["planned_billed_per_hour"] == 1.4
    assert (tmp_path / "plots" / "cost.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "plots" / "latency_cdf_traffic.png").is_file()
    page = (tmp_path / "r.html").read_text()
    assert "Skinflint cost report" in page and "data:image/png;base64," in page
    assert bad == 1 and "cannot build the report" in capsys.readouterr().err


def _leaf_task(rid: str, tid: str, t: float, children: tuple[str, ...] = ()) -> TaskRecord:
    """A done task of frame ``rid`` recorded at ``t`` (the detector, or one of its cars)."""
    module = "detector" if tid == "detector" else "car"
    return TaskRecord(rid, tid, module, "done", "t4", True, t, t, t + 0.1, 1, children)


def test_each_frame_outcome_is_emitted_once_even_when_two_workers_see_it_finished(stack):
    from core.adapters.metrics import MemoryMetrics
    from core.adapters.outcomes import FrameOutcomes
    from core.adapters.results import FrameRecord

    # GIVEN a frame whose two leaves are recorded by two workers, each with its own outcomes
    t = time.time()
    stack.results.create_frames([FrameRecord("f1", "traffic", t, t + 2.0, roots=("detector",))])

    def task(tid: str, children: tuple[str, ...] = ()) -> TaskRecord:
        return _leaf_task("f1", tid, t, children)

    stack.results.record_tasks([task("detector", ("detector/car.0", "detector/car.1"))])
    metrics = MemoryMetrics()
    first, second = (
        FrameOutcomes(stack.ddb, stack.cfg.results_table, metrics, background=True) for _ in range(2)
    )
    leaf0, leaf1 = task("detector/car.0"), task("detector/car.1")
    stack.results.record_tasks([leaf0])
    first.submit([leaf0])  # not finished yet: nothing emitted
    stack.results.record_tasks([leaf1])
    # WHEN both workers check after the last write (in their background threads)
    first.submit([leaf1])
    second.submit([leaf1])
    end = time.time() + 5
    while time.time() < end and not metrics.values("SloAttainment"):
        time.sleep(0.02)
    time.sleep(0.2)
    # THEN exactly one outcome: within the SLO, with its latency in the histogram
    assert metrics.values("SloAttainment", App="traffic") == [1.0]
    assert len(metrics.values("EndToEndLatencyMs")) == 1
    assert sum(metrics.values("EndToEndLatencyBucket")) == 1


def test_a_late_check_stops_at_the_claim_and_background_checks_wait_for_the_other_leaves(stack):
    from core.adapters.metrics import MemoryMetrics
    from core.adapters.outcomes import FrameOutcomes
    from core.adapters.results import FrameRecord

    t = time.time()
    stack.results.create_frames([FrameRecord("f2", "traffic", t, t + 2.0, roots=("detector",))])

    def task(tid: str, children: tuple[str, ...] = ()) -> TaskRecord:
        return _leaf_task("f2", tid, t, children)

    stack.results.record_tasks([task("detector", ("detector/car.0",))])
    leaf = task("detector/car.0")
    stack.results.record_tasks([leaf])
    metrics = MemoryMetrics()
    first = FrameOutcomes(stack.ddb, stack.cfg.results_table, metrics)
    assert first.observe([leaf]) == 1  # the tree walk: frame + outcome, detector, car.0
    # a second worker's check of the same frame: one read (frame + outcome), nothing emitted
    late = FrameOutcomes(stack.ddb, stack.cfg.results_table, metrics)
    reads: list[int] = []
    real = late._get
    late._get = lambda keys: reads.append(len(keys)) or real(keys)  # type: ignore[method-assign]
    assert late.observe([leaf]) == 0 and reads == [2]
    assert metrics.values("SloAttainment", App="traffic") == [1.0]
    # a background check runs delay_s after the submission, not before
    bg = FrameOutcomes(stack.ddb, stack.cfg.results_table, MemoryMetrics(), background=True, delay_s=0.5)
    checked: list[float] = []
    bg._check = lambda rid, mine=(): checked.append(time.monotonic()) or "no"  # type: ignore[method-assign]
    t0 = time.monotonic()
    bg.submit([leaf])
    end = time.time() + 5
    while not checked and time.time() < end:
        time.sleep(0.02)
    assert checked and checked[0] - t0 >= 0.5


def test_a_walk_reads_the_roots_with_the_frame_and_tolerates_other_roots(stack):
    from core.adapters.metrics import MemoryMetrics
    from core.adapters.outcomes import FrameOutcomes
    from core.adapters.results import FrameRecord

    t = time.time()
    stack.results.create_frames(
        [FrameRecord(rid, "traffic", t, t + 2.0, roots=("detector",)) for rid in ("f3", "f4")]
    )
    for rid in ("f3", "f4"):
        stack.results.record_tasks([_leaf_task(rid, "detector", t, ("detector/car.0",))])
        stack.results.record_tasks([_leaf_task(rid, "detector/car.0", t)])

    def counted(outcomes: FrameOutcomes) -> list[int]:
        reads: list[int] = []
        real = outcomes._get
        outcomes._get = lambda keys: reads.append(len(keys)) or real(keys)  # type: ignore[method-assign]
        return reads

    # GIVEN the app's roots as a hint: frame + outcome + detector in one read, then the car
    metrics = MemoryMetrics()
    hinted = FrameOutcomes(stack.ddb, stack.cfg.results_table, metrics, roots=("detector",))
    reads = counted(hinted)
    assert hinted.observe([_leaf_task("f3", "detector/car.0", t)]) == 1
    assert reads == [3, 1]  # two reads for a two-level DAG, not three
    # a hint that does not match the frame's roots (another version's DAG) costs one more read
    stale = FrameOutcomes(stack.ddb, stack.cfg.results_table, metrics, roots=("tracker",))
    reads = counted(stale)
    assert stale.observe([_leaf_task("f4", "detector/car.0", t)]) == 1
    assert reads == [3, 1, 1]
    assert metrics.values("SloAttainment", App="traffic") == [1.0, 1.0]
    assert (hinted.stats["won"], hinted.stats["reads"], stale.stats["reads"]) == (1, 2, 3)


def test_a_leaf_recorded_before_its_parent_checks_again_until_the_parent_is_recorded(stack, monkeypatch):
    import core.adapters.outcomes as outcomes_mod
    from core.adapters.metrics import MemoryMetrics
    from core.adapters.outcomes import FrameOutcomes
    from core.adapters.results import FrameRecord

    # GIVEN frames whose car is recorded before the detector (a parent writes after forwarding)
    t = time.time()
    stack.results.create_frames(
        [FrameRecord(rid, "traffic", t, t + 5.0, roots=("detector",)) for rid in ("f5", "f6", "f7")]
    )
    for rid in ("f5", "f6", "f7"):
        stack.results.record_tasks([_leaf_task(rid, "detector/car.0", t)])
    metrics = MemoryMetrics()
    bg = FrameOutcomes(stack.ddb, stack.cfg.results_table, metrics, background=True, delay_s=0.05)
    monkeypatch.setattr(outcomes_mod, "AWAIT_CHECKS", 8)
    bg.submit([_leaf_task("f5", "detector/car.0", t)])
    # WHEN the detector's write comes after the car's first check
    end = time.time() + 5
    while bg.stats["awaited"] == 0 and time.time() < end:
        time.sleep(0.01)
    stack.results.record_tasks([_leaf_task("f5", "detector", t, ("detector/car.0",))])
    while not metrics.values("SloAttainment") and time.time() < end:
        time.sleep(0.01)
    # THEN the car's worker checked again and emitted the frame's outcome once
    assert metrics.values("SloAttainment", App="traffic") == [1.0]
    assert bg.stats["awaited"] >= 1 and bg.stats["won"] == 1
    # a sibling not recorded yet is not waited for (its own check will find the frame finished)
    stack.results.record_tasks([_leaf_task("f6", "detector", t, ("detector/car.0", "detector/car.1"))])
    now = FrameOutcomes(stack.ddb, stack.cfg.results_table, metrics)
    assert now._check("f6", ("detector/car.0",)) == "no" and now.stats["unfinished"] == 1
    # a parent never recorded: the checks stop after AWAIT_CHECKS and say so
    bg.submit([_leaf_task("f7", "detector/car.0", t)])
    while bg.stats["gave_up"] == 0 and time.time() < end + 5:
        time.sleep(0.02)
    assert bg.stats["gave_up"] == 1 and bg.stats["awaited"] >= 1 + 8
    assert metrics.values("SloAttainment", App="traffic") == [1.0]


def test_the_leaves_of_a_frame_check_one_after_the_other() -> None:
    from core.adapters.metrics import MemoryMetrics
    from core.adapters.outcomes import DEFAULT_DELAY_S, FrameOutcomes, leaf_rank

    dag = {"detector": ["vehicle", "person"], "vehicle": [], "person": []}
    ranks = {m: leaf_rank(dag, dag.__getitem__, m) for m in dag}
    assert ranks == {"person": 0, "vehicle": 1, "detector": 2}  # leaves by name, then the rest

    class Results:  # DynamoDB-backed as far as for_results can tell
        _ddb, _table = object(), "results"

    delays = {
        m: FrameOutcomes.for_results(Results(), MemoryMetrics(), rank=r).delay_s  # type: ignore[union-attr]
        for m, r in ranks.items()
    }
    assert delays == pytest.approx(
        {"person": DEFAULT_DELAY_S, "vehicle": 2 * DEFAULT_DELAY_S, "detector": 3 * DEFAULT_DELAY_S}
    )
