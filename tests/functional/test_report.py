"""The cost report against moto's CloudWatch and config table: worker metrics with one plan
version, instance metrics with versioned fleet plans, and the CLI (JSON, plots, HTML) on moto's
server."""

from __future__ import annotations

import datetime as dt
import json
import time
from fractions import Fraction

import pytest

from core.adapters.metrics import CloudWatchMetrics
from core.adapters.outcomes import bucket_label
from core.adapters.plan_store import PlanStore
from core.adapters.results import TaskRecord
from core.ids import new_post_id, request_id
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


# -- frame outcomes by share (core/adapters/outcomes.py): what the report's SloAttainment,
# FramesFinished, EndToEndLatency* and FramesDropped series are made of


def _terminal(
    rid: str, tid: str, t: float, weight: str, finished_at: float, status: str = "done", slo_s: float = 0.5
) -> TaskRecord:
    """A terminal car task of frame ``rid`` (accepted at ``t``) carrying ``weight`` of it."""
    return TaskRecord(
        rid, tid, "car", status, "cpu", True, t, finished_at - 0.1, finished_at, 1,
        reason=None if status == "done" else "deadline", app="traffic", accepted_at=t,
        deadline=t + slo_s, weight=weight,
    )  # fmt: skip


def _outcome_workers(stack, n_frames: int) -> tuple[list[str], dict[str, int]]:
    """``n_frames`` frames (more while none has two cars) and, per frame, its car count."""
    from core.routing import child_count
    from tests.functional.test_worker import send_frames

    ids: list[str] = []
    while len(ids) < n_frames or all(child_count(f"{rid}/detector", "car", 1.5) < 2 for rid in ids):
        ids += send_frames(stack, 5)
    return ids, {rid: child_count(f"{rid}/detector", "car", 1.5) for rid in ids}


def _run_dag(det, cars, expected_cars: int, seconds: float = 5.0) -> list:
    """The detector's windows, then the cars' until they ran ``expected_cars`` tasks: the cars'
    batches."""
    from tests.functional.test_worker import drain

    drain(det, until=time.time() + seconds)
    end = time.time() + seconds
    batches: list = []
    while sum(w.totals["ran"] + w.totals["dropped"] for w in cars) < expected_cars and time.time() < end:
        for w in cars:
            w.poll_once(wait_s=0)
            batches += w.run_ready()
        time.sleep(0.02)
    return batches


def test_the_outcome_shares_of_a_frame_sum_to_one_frame_across_the_workers_of_a_dag(stack):
    from core.adapters.metrics import MemoryMetrics
    from core.adapters.outcomes import FrameOutcomes
    from core.ids import post_of
    from tests.functional.test_worker import front, make_worker

    # GIVEN frames of which some have two cars (a detector forwarding to two car machines), each
    # worker emitting its outcomes into metrics of its own (as separate processes do)
    ids, fan = _outcome_workers(stack, 6)
    det = make_worker(stack, "detector", outcomes=FrameOutcomes(MemoryMetrics()))
    outs = [MemoryMetrics(), MemoryMetrics()]
    cars = [make_worker(stack, "car", 0, m, outcomes=FrameOutcomes(outs[m])) for m in range(2)]
    # WHEN the DAG runs
    _run_dag(det, cars, sum(fan.values()))
    assert all(front(stack).result(rid).status == "done" for rid in ids)
    # THEN the detector (it forwarded every task) emitted nothing, and the cars' shares, summed over
    # both machines, count every frame exactly once in every outcome series
    assert det.outcomes is not None and det.outcomes.emitted == 0

    def weights(name: str) -> float:
        return sum(m.weights(name, App="traffic") for m in outs)

    n = len(ids)
    for name in ("FramesFinished", "SloAttainment", "EndToEndLatencyMs", "EndToEndLatencyBucket"):
        assert weights(name) == pytest.approx(n, abs=1e-9), name
    assert sum(m.total("SloAttainment", App="traffic") for m in outs) == pytest.approx(n)  # all in time
    assert weights("FramesDropped") == 0
    assert sum(w.outcomes.emitted for w in cars if w.outcomes is not None) == pytest.approx(n)
    # a frame of two cars gave each a half (exact fractions in the records: weights sum to 1)
    two = next(rid for rid in ids if fan[rid] == 2)
    state = stack.results.post_frames(post_of(two))[two]
    assert sorted(state.weights.values()) == [0.5, 0.5] and state.weight == 1


def test_a_late_branch_lowers_slo_attainment_by_its_share_and_the_report_reads_the_shares(aws):
    import boto3

    from core.adapters.metrics import MemoryMetrics
    from core.adapters.outcomes import FrameOutcomes

    cfg, ddb, sqs, cw = aws
    t = time.time()
    a, b = request_id(new_post_id(t + 0.5), 0), request_id(new_post_id(t + 0.5), 0)
    # GIVEN two frames (SLO 0.5 s): a's two cars, one in time and one late; b's three cars, one late
    # and one dropped, recorded by two workers
    left = [
        _terminal(a, "detector/car.0", t, "1/2", t + 0.3),
        _terminal(b, "detector/car.0", t, "1/3", t + 0.2),
    ]
    right = [
        _terminal(a, "detector/car.1", t, "1/2", t + 0.7),
        _terminal(b, "detector/car.1", t, "1/3", t + 0.9),
        _terminal(b, "detector/car.2", t, "1/3", t + 0.4, status="dropped"),
    ]
    metrics = MemoryMetrics()
    cwm = CloudWatchMetrics(boto3.client("cloudwatch", region_name=cfg.region), "Skinflint")
    for records in (left, right):  # each worker emits its own records' shares
        FrameOutcomes(metrics).submit(records)
        FrameOutcomes(cwm).submit(records)
    # THEN every frame counts once, and the late branch loses only its share of its frame
    assert metrics.weights("FramesFinished", App="traffic") == pytest.approx(2.0)
    assert metrics.weights("SloAttainment", App="traffic") == pytest.approx(2.0)
    within = 1 / 2 + 1 / 3  # a: car.0; b: car.0 (car.1 late, car.2 dropped)
    assert metrics.total("SloAttainment", App="traffic") == pytest.approx(within)
    # the latency of the done branches, each by its share (the dropped one has none)
    assert metrics.weights("EndToEndLatencyMs", App="traffic") == pytest.approx(2.0 - 1 / 3)
    assert metrics.total("EndToEndLatencyMs", App="traffic") == pytest.approx(
        (300 + 700) / 2 + (200 + 900) / 3
    )
    assert metrics.weights("EndToEndLatencyBucket", App="traffic", LeMs=bucket_label(700.0)) == pytest.approx(
        0.5
    )
    assert metrics.weights("FramesDropped", App="traffic") == pytest.approx(1 / 3)
    # AND the report, reading CloudWatch's statistic sets (SampleCount = the sum of the weights),
    # counts the same frames and the same attainment
    cwm.flush()
    store = PlanStore(ddb, cfg.config_table)
    publish_app(store, sqs, APP, plan(), 10.0, origin_s=t - 600, activate_at=t - 600, prices=PRICES)
    start = float(int(t) // P * P - P)
    r = collect_report(
        cw, ddb, namespace="Skinflint", config_table=cfg.config_table, prices=PRICES,
        start=start, end=start + 3 * P, period_s=P,
    )  # fmt: skip
    app = r["apps"]["traffic"]
    assert app["frames_completed"] == pytest.approx(2.0)
    assert app["slo_attainment"] == pytest.approx(within / 2)
    assert app["frames_dropped"] == pytest.approx(1 / 3)
    assert app["latency_mean_s"] == pytest.approx(((300 + 700) / 2 + (200 + 900) / 3) / (2.0 - 1 / 3) / 1e3)
    assert app["latency_cdf"][-1][1] == pytest.approx(1.0)


def test_a_dropped_task_emits_frames_dropped_by_its_share() -> None:
    from core.adapters.metrics import MemoryMetrics
    from core.adapters.outcomes import FrameOutcomes

    t = time.time()
    rid, whole = request_id(new_post_id(t + 0.5), 0), request_id(new_post_id(t + 0.5), 1)
    metrics = MemoryMetrics()
    outcomes = FrameOutcomes(metrics)
    # GIVEN a frame with four cars of which one was dropped, and a frame dropped at its root
    emitted = outcomes.submit(
        [
            *(_terminal(rid, f"detector/car.{k}", t, "1/4", t + 0.2) for k in range(3)),
            _terminal(rid, "detector/car.3", t, "1/4", t + 0.6, status="dropped"),
            _terminal(whole, "detector", t, "1", t + 0.6, status="dropped"),
        ]
    )
    # THEN FramesDropped counts the dropped shares, in frames: a quarter of one and all of the other
    assert emitted == pytest.approx(2.0)
    assert metrics.total("FramesDropped", App="traffic") == pytest.approx(1.25)
    assert metrics.weights("FramesDropped", App="traffic") == pytest.approx(1.25)
    assert metrics.weights("FramesFinished", App="traffic") == pytest.approx(2.0)
    # a dropped share is not within the SLO and has no end-to-end latency
    assert metrics.total("SloAttainment", App="traffic") == pytest.approx(0.75)
    assert metrics.weights("EndToEndLatencyMs", App="traffic") == pytest.approx(0.75)


def _received_car(stack) -> tuple[dict, str, str]:
    """A frame run through the detector and one of its car messages received by hand: the message,
    the frame's request id and the car machine's queue."""
    from tests.functional.test_worker import drain, make_worker, send_frames

    (rid,) = send_frames(stack, 1)
    drain(make_worker(stack, "detector"), until=time.time() + 5)
    end = time.time() + 5
    while time.time() < end:
        for key, url in stack.deployment.queues["car"].items():
            got = stack.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=30)
            if got.get("Messages"):
                return got["Messages"][0], rid, key
        time.sleep(0.05)
    raise AssertionError("no car message")


def test_a_redelivered_terminal_task_already_recorded_is_not_emitted_again(stack):
    from core import wire
    from core.adapters.metrics import MemoryMetrics
    from core.adapters.outcomes import FrameOutcomes
    from tests.functional.test_worker import deliver, front, make_worker

    raw, rid, key = _received_car(stack)
    tasks = wire.decode(raw["Body"])  # the cars of one frame on one machine share a message
    share = float(sum(Fraction(t.weight) for t in tasks))
    group, machine = (int(x) for x in key.split("/"))
    metrics = MemoryMetrics()
    car = make_worker(stack, "car", group, machine, outcomes=FrameOutcomes(metrics))
    # GIVEN its car tasks run and recorded, their shares emitted
    first = deliver(car, raw, 1)
    assert sum(o.ran + o.dropped for o in first) == len(tasks) and sum(o.duplicates for o in first) == 0
    assert metrics.weights("FramesFinished", App="traffic") == pytest.approx(share)
    # WHEN its message comes again (its delete was lost: the second receive is checked first)
    second = deliver(car, raw, 2)
    # THEN each is found recorded: a duplicate, neither written nor emitted again
    assert sum(o.duplicates for o in second) == len(tasks)
    assert metrics.weights("FramesFinished", App="traffic") == pytest.approx(share)
    assert metrics.weights("SloAttainment", App="traffic") == pytest.approx(share)
    assert car.outcomes is not None and car.outcomes.emitted == pytest.approx(share)
    recorded = [t.task_id for t in front(stack).result(rid).tasks]
    assert all(recorded.count(t.task_id) == 1 for t in tasks)


class _DynamoCalls:
    """A results client of its own that counts its DynamoDB operations (name, ConsistentRead)."""

    def __init__(self, region: str) -> None:
        import boto3

        self.client = boto3.client("dynamodb", region_name=region)
        self.calls: list[tuple[str, bool | None]] = []
        self.client.meta.events.register("provide-client-params.dynamodb", self._seen)

    def _seen(self, model, params, **_: object) -> None:
        self.calls.append((model.name, params.get("ConsistentRead")))

    def names(self) -> set[str]:
        return {name for name, _ in self.calls}


def test_the_workers_make_no_read_of_the_results_table_unless_a_task_is_redelivered(stack):
    from core.adapters.results import ResultStore
    from core.wire import decode
    from tests.functional.test_worker import deliver, front, make_worker

    det_ddb, ddb = _DynamoCalls(stack.cfg.region), _DynamoCalls(stack.cfg.region)
    results = ResultStore(ddb.client, stack.cfg.results_table)
    # GIVEN the DAG's workers recording through counting clients
    ids, fan = _outcome_workers(stack, 4)
    det = make_worker(stack, "detector", results=ResultStore(det_ddb.client, stack.cfg.results_table))
    cars = [make_worker(stack, "car", 0, m, results=results) for m in range(2)]
    batches = _run_dag(det, cars, sum(fan.values()))
    assert all(front(stack).result(rid).status == "done" for rid in ids)
    # THEN the normal path only wrote: the detector (it forwarded every task) nothing, the cars one
    # BatchWriteItem per batch; no Query, GetItem or BatchGetItem
    assert det_ddb.calls == []
    assert ddb.names() == {"BatchWriteItem"}
    assert len(ddb.calls) == len(batches) >= 1
    # WHEN a car message is delivered again (a lost delete): one consistent Query of its POST
    ddb.calls.clear()
    raw, _, key = _received_car(stack)
    group, machine = (int(x) for x in key.split("/"))
    car = make_worker(stack, "car", group, machine, results=results)
    deliver(car, raw, 1)
    assert ddb.names() == {"BatchWriteItem"}
    ddb.calls.clear()
    (again,) = deliver(car, raw, 2)
    # every task of the message (a parent batch's children on one queue share one: core/wire.py) is
    # a duplicate, checked with one consistent Query of their POST
    assert again.duplicates == len(decode(raw["Body"])) >= 1
    assert ddb.calls == [("Query", True)]


def test_a_flush_sends_the_sum_of_the_weights_as_the_sample_count() -> None:
    """What the report reads of a weighted series: SampleCount = the frames (the sum of the
    shares), Sum = the shares x values, in every sink."""
    from core.adapters.metrics import EmfMetrics, MemoryMetrics

    # SloAttainment of one frame in time (1) and a late half (0), plus a third of a frame in time
    samples = [(1.0, 1.0), (0.0, 0.5), (1.0, 1 / 3)]

    class Client:
        def __init__(self) -> None:
            self.data: list[dict] = []

        def put_metric_data(self, Namespace: str, MetricData: list[dict]) -> None:  # noqa: N803
            self.data += MetricData

    memory, client, lines = MemoryMetrics(), Client(), []
    sinks = (memory, CloudWatchMetrics(client, "Skinflint"), EmfMetrics("Skinflint", write=lines.append))
    for sink in sinks:
        for value, weight in samples:
            sink.put("SloAttainment", value, "None", at=1_800_000_000.0, weight=weight, App="traffic")
    assert memory.weights("SloAttainment") == pytest.approx(1.5 + 1 / 3)
    assert memory.total("SloAttainment") == pytest.approx(1 + 1 / 3)
    ((_, stat),) = memory.drain().items()
    assert (stat.count, stat.total, stat.low, stat.high) == pytest.approx((1.5 + 1 / 3, 1 + 1 / 3, 0.0, 1.0))
    sinks[1].flush()
    ((datum),) = client.data
    assert datum["StatisticValues"] == pytest.approx(
        {"SampleCount": 1.5 + 1 / 3, "Sum": 1 + 1 / 3, "Minimum": 0.0, "Maximum": 1.0}
    )
    sinks[2].flush()
    (line,) = lines
    value = json.loads(line)["SloAttainment"]
    # what CloudWatch extracts from the value set (Values x Counts) is the same statistic set
    assert sum(value["Counts"]) == pytest.approx(1.5 + 1 / 3) == value["Count"]
    assert sum(v * c for v, c in zip(value["Values"], value["Counts"], strict=True)) == pytest.approx(
        1 + 1 / 3
    )
    assert (min(value["Values"]), max(value["Values"])) == (0.0, 1.0)
