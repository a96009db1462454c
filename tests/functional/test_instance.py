"""The instance agent against moto and the real plan store: claiming a slot and serving all of its
shares on one device, idling without a slot, draining on scale-in and on a Spot notice without
losing a frame, and a plan version change that keeps serving and loses nothing."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from control.queues import create_module_queues, ensure_app_dlq
from core.adapters.blobs import BlobStore
from core.adapters.config_store import ConfigStore
from core.adapters.metrics import MemoryMetrics
from core.adapters.plan_store import InstanceStatus, PlanStore
from core.adapters.queues import TaskQueues
from core.adapters.results import ResultStore
from core.schema import Deployment
from core.settings import DataPlaneConfig
from front.service import FrontService
from planner.models import MachineGroup, ModulePlan, Plan
from planner.packing import FleetPlan, Instance, plan_shares
from skinflint.local.fleet import LocalImds
from skinflint.local.provision import create_base
from tests.functional.conftest import API_KEY, jpeg_bytes, two_module_app
from workers.agent import InstanceAgent
from workers.lifecycle import DrainNotice, ImdsClient, LifecycleWatcher
from workers.runtimes import EmulatedRuntime
from workers.shares import RuntimeCache, WorkerServices

pytestmark = pytest.mark.functional

T4 = 0.526  # $/h


def plan(detector_batch: int = 4, detector_rate: float = 4.0) -> Plan:
    # detector: 1 machine, batch b at 4 req/s -> windows of b/4 s (1 s for b = 4: time to drain
    # while requests are buffered); car: 2 machines, batch 3 at 3 req/s each (W = 6 >= 1.5 * 4)
    return Plan(
        objective="billed",
        cost_per_hour=1.0,
        billed_per_hour=3 * T4,
        solve_ms=0.0,
        modules={
            "detector": ModulePlan(
                latency_budget_s=1.5,
                worst_case_latency_s=detector_batch / detector_rate + 0.02,
                groups=[
                    MachineGroup(
                        hardware="t4",
                        batch=detector_batch,
                        machines=1,
                        rate_per_machine=detector_rate,
                        duration_s=0.02,
                    )
                ],
            ),
            "car": ModulePlan(
                latency_budget_s=1.0,
                worst_case_latency_s=0.52,
                groups=[
                    MachineGroup(hardware="t4", batch=3, machines=2, rate_per_machine=3.0, duration_s=0.02)
                ],
            ),
        },
    )


def one_instance_fleet(p: Plan) -> FleetPlan:
    """Every share of the app co-located on one t4 instance (slot t4/0)."""
    shares = plan_shares("traffic", p)
    return FleetPlan(
        instances=[Instance(slot="t4/0", hardware="t4", shares=shares)],
        prices={"t4": T4},
        occupancy_per_hour=1.0,
        dedicated_per_hour=len(shares) * T4,
    )


@dataclass
class Env:
    cfg: DataPlaneConfig
    ddb: Any
    sqs: Any
    plans: PlanStore
    front: FrontService
    results: ResultStore
    queues: TaskQueues
    metrics: MemoryMetrics
    dlq_arn: str
    blobs: BlobStore
    slo_s: float = 5.0  # room for a replacement instance to start in the drain tests

    def publish(self, p: Plan, *, changed: list[str], activate_in: float = 0.0, fresh: bool = False) -> Any:
        """A new version: fresh queues (named with the version) for ``changed`` modules, the
        previous version's queues for the others."""
        m = self.plans.current()
        v = self.plans.reserve_version()
        old = self.plans.deployment(m.version, "traffic") if m else None
        queues = {}
        for module, mp in p.modules.items():
            if old is not None and module not in changed:
                queues[module] = old.queues[module]
            else:
                queues[module] = create_module_queues(
                    self.sqs, "traffic", module, mp, dlq_arn=self.dlq_arn, version=v, visibility_timeout_s=5
                )
        app = two_module_app()
        dep = Deployment(
            app="traffic",
            version=v,
            origin_s=time.time() - 100.0 if old is None else old.origin_s,
            slo_s=self.slo_s,
            frame_rate=4.0,
            roots=["detector"],
            edges=list(app.edges),
            plan=p,
            queues=queues,
            emulated_hardware=["t4"],
        )
        return self.plans.publish(
            [dep],
            one_instance_fleet(p),
            expected=m.version if m else None,
            activate_at=time.time() + activate_in,
            reason="test",
            version=v,
        )

    def send(self, n: int) -> list[str]:
        out = self.front.accept("traffic", [(jpeg_bytes(seed=i), "image/jpeg") for i in range(n)])
        return [a.request_id for a in out.accepted]

    def wait_done(self, ids: list[str], timeout_s: float) -> dict[str, Any]:
        end = time.time() + timeout_s
        res: dict[str, Any] = {}
        while time.time() < end:
            res = {rid: self.results.get_request(rid) for rid in ids}
            if all(r is not None and r.status != "queued" for r in res.values()):
                break
            time.sleep(0.1)
        return res

    def agent(self, instance_id: str, **kw: Any) -> InstanceAgent:
        heartbeats: list[dict[str, Any]] = []

        def beat(info: dict[str, Any]) -> None:
            heartbeats.append(info)
            self.plans.put_instance(InstanceStatus.model_validate(info))

        agent = InstanceAgent(
            instance_id=instance_id,
            hardware="t4",
            plans=self.plans,
            services=WorkerServices(self.queues, self.results, self.blobs, self.metrics),
            resolve=lambda dep, share: ("emulated", "", None, 1),
            runtimes=RuntimeCache(lambda a: EmulatedRuntime(a.model_s or a.duration_s, a.hardware)),
            heartbeat=beat,
            poll_s=0.1,
            recheck_s=kw.pop("recheck_s", 0.2),
            report_s=0.3,
            retire_grace_s=0.5,
            retire_quiet_s=0.3,
            **kw,
        )
        agent.heartbeats = heartbeats  # type: ignore[attr-defined]
        return agent


@pytest.fixture
def env() -> Any:
    import boto3
    from moto import mock_aws

    with mock_aws():
        cfg = DataPlaneConfig()
        ddb, sqs, s3 = (boto3.client(s, region_name=cfg.region) for s in ("dynamodb", "sqs", "s3"))
        create_base(ddb, s3, cfg)
        plans = PlanStore(ddb, cfg.config_table)
        store = ConfigStore(ddb, cfg.config_table)
        store.put_api_key(API_KEY, "tests")
        metrics = MemoryMetrics()
        results, queues, blobs = (
            ResultStore(ddb, cfg.results_table),
            TaskQueues(sqs),
            BlobStore(s3, cfg.bucket),
        )
        front = FrontService(
            config=cfg, store=store, results=results, queues=queues, blobs=blobs, metrics=metrics, plans=plans
        )
        _, dlq_arn = ensure_app_dlq(sqs, "traffic")
        yield Env(cfg, ddb, sqs, plans, front, results, queues, metrics, dlq_arn, blobs)


def run_in_thread(agent: InstanceAgent) -> threading.Thread:
    t = threading.Thread(target=agent.run, daemon=True)
    t.start()
    return t


def wait_for(cond, timeout_s: float = 5.0, what: str = "") -> None:
    end = time.time() + timeout_s
    while time.time() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def buffered(agent: InstanceAgent) -> int:
    return sum(len(r.worker.assembler) for r in agent._runners)


def assert_all_done_once(res: dict[str, Any], n: int) -> None:
    assert len(res) == n
    for rid, r in res.items():
        assert r is not None and r.status == "done", (rid, r)
        ids = [t.task_id for t in r.tasks]
        assert len(ids) == len(set(ids))  # every task recorded once


def test_agent_serves_every_share_of_its_slot_on_one_device_and_a_surplus_instance_idles(env):
    env.publish(plan(), changed=["detector", "car"])
    a, b = env.agent("i-a"), env.agent("i-b")
    ta = run_in_thread(a)
    wait_for(lambda: a.state == "serving", what="i-a serving")
    tb = run_in_thread(b)
    # the heartbeat is recorded in the agent before its write to the table lands: wait for both
    wait_for(lambda: b.heartbeats and "i-b" in env.plans.instances(), what="i-b heartbeat")
    # THEN i-a holds the only slot with its three shares (detector + two car machines), i-b idles
    assert a.slot == "t4/0" and len(a._runners) == 3
    assert len({id(r.worker.device) for r in a._runners}) == 1  # one device for all shares
    assert b.slot is None and b.state == "idle" and b.heartbeats[-1]["state"] == "idle"
    assert env.plans.instances()["i-b"].state == "idle"
    ids = env.send(4)
    res = env.wait_done(ids, 8)
    assert_all_done_once(res, 4)
    assert {t.module for r in res.values() for t in r.tasks} == {"detector", "car"}
    assert a.device.busy_s > 0
    for agent, t in ((a, ta), (b, tb)):
        agent.request_drain(DrainNotice("sigterm", time.time()))
        t.join(10)
    assert env.plans.claims(1) == {}  # both gone: the slot is free again
    assert env.plans.instances()["i-a"].state == "gone"


def test_drain_on_scale_in_releases_buffered_requests_to_the_next_instance(env):
    # GIVEN i-a serving the only slot with requests buffered (1 s windows), i-b idle
    env.publish(plan(), changed=["detector", "car"])
    completed: list[str] = []
    imds = LocalImds().start()
    imds.add("i-a")
    try:
        a = env.agent(
            "i-a",
            watcher=LifecycleWatcher(ImdsClient(imds.url("i-a")), poll_s=0.05),
            complete_lifecycle=completed.append,
        )
        b = env.agent("i-b")
        ta = run_in_thread(a)
        wait_for(lambda: a.state == "serving", what="i-a serving")
        tb = run_in_thread(b)
        wait_for(lambda: b.state == "idle", what="i-b idle")
        ids = env.send(3)
        wait_for(lambda: buffered(a) >= 3, what="requests buffered on i-a")
        # WHEN the Auto Scaling group scales in i-a (held in Terminating:Wait)
        imds.set_target_state("i-a", "Terminated")
        ta.join(10)
        # THEN it drained: released what it held, gave up its slot, completed the lifecycle action
        report = a.drain_report
        assert report is not None and report.reason == "scale-in"
        assert report.released >= 3 and report.completed_lifecycle
        assert report.seconds < 5.0
        assert completed == ["i-a"]
        # and i-b claims the freed slot and answers every frame, each task recorded once
        wait_for(lambda: b.slot == "t4/0", what="i-b claims the freed slot")
        res = env.wait_done(ids, 10)
        assert_all_done_once(res, 3)
        assert all(t.hardware == "t4" for r in res.values() for t in r.tasks)
        assert sum(r.worker.totals["duplicates"] for r in b._runners) == 0
        assert env.metrics.values("DrainSeconds", Reason="scale-in") == [pytest.approx(report.seconds)]
        b.request_drain(DrainNotice("sigterm", time.time()))
        tb.join(10)
    finally:
        imds.stop()


def test_spot_notice_drains_within_the_two_minute_window(env):
    env.publish(plan(), changed=["detector", "car"])
    imds = LocalImds().start()
    imds.add("i-spot")
    try:
        a = env.agent("i-spot", watcher=LifecycleWatcher(ImdsClient(imds.url("i-spot")), poll_s=0.05))
        ta = run_in_thread(a)
        wait_for(lambda: a.state == "serving", what="serving")
        ids = env.send(3)
        wait_for(lambda: buffered(a) >= 3, what="requests buffered")
        t0 = time.time()
        imds.interrupt_spot("i-spot", t0 + 120)  # EC2 reclaims it in two minutes
        ta.join(30)
        gone_after = time.time() - t0
        report = a.drain_report
        assert report is not None and report.reason == "spot"
        assert report.window_s == pytest.approx(120, abs=2)
        assert report.released >= 3
        assert gone_after < 10.0, gone_after  # far inside the window (figure printed below)
        print(f"spot drain: notice to drained {gone_after:.2f} s, drain itself {report.seconds:.3f} s")
        assert env.plans.claims(1) == {}
        # a replacement instance picks the released requests up
        b = env.agent("i-replacement")
        tb = run_in_thread(b)
        assert_all_done_once(env.wait_done(ids, 10), 3)
        b.request_drain(DrainNotice("sigterm", time.time()))
        tb.join(10)
    finally:
        imds.stop()


def test_version_change_keeps_serving_and_loses_nothing(env):
    # GIVEN v1 served by one instance, frames streaming at 4 frames/s
    env.publish(plan(detector_batch=4), changed=["detector", "car"])
    a = env.agent("i-a")
    ta = run_in_thread(a)
    wait_for(lambda: a.state == "serving", what="serving v1")
    cars_v1 = {r.key: r for r in a._runners if r.share.module == "car"}
    ids: list[str] = []
    stop = threading.Event()

    def stream() -> None:
        start = time.time()
        k = 0
        while not stop.is_set():
            time.sleep(max(0.0, start + k / 4.0 - time.time()))
            ids.extend(env.send(1))
            k += 1

    streamer = threading.Thread(target=stream, daemon=True)
    streamer.start()
    time.sleep(2.0)
    # WHEN v2 changes the detector's configuration (fresh queues), the car's stays, active in 1 s
    m2 = env.publish(plan(detector_batch=2), changed=["detector"], activate_in=1.0)
    wait_for(lambda: a.version == m2.version, what="v2 adopted")
    # the new detector worker runs before the old one stops; the car workers are the same objects
    detectors = [r for r in a._runners if r.share.module == "detector"]
    assert len(detectors) == 2 and {r.version for r in detectors} == {1, 2}
    wait_for(lambda: time.time() > m2.activate_at + 0.1, what="activation")
    wait_for(lambda: len(a._runners) == 3, timeout_s=8, what="v1 detector retired")
    time.sleep(1.0)
    stop.set()
    streamer.join(5)
    # THEN every frame is answered (none lost across the change), the car workers were kept
    res = env.wait_done(ids, 10)
    assert_all_done_once(res, len(ids))
    assert {r.key: r for r in a._runners if r.share.module == "car"} == cars_v1
    assert all(r.version == m2.version for r in a._runners)
    assert a.runtimes.loads == 1  # one emulated model (t4, 20 ms) for every share: loaded once, reused
    batches = {t.batch_size for r in res.values() for t in r.tasks if t.module == "detector"}
    assert max(batches) <= 4
    v1_queue = env.plans.deployment(1, "traffic").queues["detector"]["0/0"]
    assert env.queues.depth(v1_queue) == 0
    assert env.plans.claims(1) == {}  # the old version's claim is released once its shares retired
    assert a.heartbeats[-1]["serving_versions"] == [m2.version]
    print(f"version change: {len(ids)} frames, all answered; detector batch sizes seen {sorted(batches)}")
    a.request_drain(DrainNotice("sigterm", time.time()))
    ta.join(10)


def test_a_superseded_version_is_skipped_and_a_moved_activation_is_followed(env):
    # GIVEN v1 served by one instance, frames streaming
    env.publish(plan(detector_batch=4), changed=["detector", "car"])
    a = env.agent("i-a")
    ta = run_in_thread(a)
    wait_for(lambda: a.state == "serving", what="serving v1")
    ids: list[str] = []
    stop = threading.Event()

    def stream() -> None:
        start = time.time()
        k = 0
        while not stop.is_set():
            time.sleep(max(0.0, start + k / 4.0 - time.time()))
            ids.extend(env.send(1))
            k += 1

    streamer = threading.Thread(target=stream, daemon=True)
    streamer.start()
    time.sleep(1.0)
    # WHEN v2 is published gated (active in a minute at the latest) and v3 supersedes it before it
    # activates: v3's previous is v1, the version the front serves
    m2 = env.publish(plan(detector_batch=2), changed=["detector"], activate_in=60.0)
    wait_for(lambda: a.version == m2.version, what="v2 adopted")
    m3 = env.publish(plan(detector_batch=1, detector_rate=4.0), changed=["detector"], activate_in=60.0)
    assert m3.previous == 1 and m2.previous == 1
    wait_for(lambda: a.version == m3.version, what="v3 adopted")
    assert [p.version for p in a._pending] == [m3.version]  # v2 will never be served: dropped
    # the agent heartbeats at once after adopting (what shows the control loop its slot is served)
    wait_for(lambda: env.plans.instances()["i-a"].version == m3.version, timeout_s=2, what="heartbeat")
    assert env.front.router("traffic").deployment.version == 1  # the front still serves v1
    time.sleep(1.0)
    assert {r.version for r in a._runners if r.share.module == "detector"} >= {1}  # v1 keeps serving
    # and the control loop moves v3's activation earlier (its slot is served): the agent follows
    cur = env.plans.current()
    moved = env.plans.set_activation(cur, time.time() + 1.0, activation="ready", ready_at=time.time())
    wait_for(lambda: not a._pending, timeout_s=3, what="v3 active on the agent")
    assert time.time() >= moved.activate_at - 0.05 and time.time() < m3.activate_at
    wait_for(lambda: all(r.version == m3.version for r in a._runners), timeout_s=8, what="old shares retired")
    time.sleep(1.0)
    stop.set()
    streamer.join(5)
    # THEN every frame is answered across both changes, and nothing of v1 or v2 is left
    assert_all_done_once(env.wait_done(ids, 10), len(ids))
    assert env.front.router("traffic").deployment.version == m3.version
    assert env.plans.claims(1) == {} and env.plans.claims(m2.version) == {}
    a.request_drain(DrainNotice("sigterm", time.time()))
    ta.join(10)
