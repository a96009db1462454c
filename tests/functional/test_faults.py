"""Faults against moto: an instance killed mid-batch, a worker dying mid-write, poison messages, and
overload at twice the planned rate (admission control). Every app is deployed as a versioned plan
in the plan store (tests/functional/_deploy.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from core.adapters.config_store import ConfigStore
from core.adapters.metrics import MemoryMetrics
from core.adapters.outcomes import FrameOutcomes
from core.adapters.plan_store import PlanStore
from core.adapters.results import ResultStore
from core.ids import post_of
from core.routing import Router
from core.settings import DataPlaneConfig
from front.admission import Admission, AdmissionConfig
from front.app import create_app
from front.service import FrontService
from planner.models import AppModuleSpec, AppSpec, MachineGroup, ModulePlan, Plan
from skinflint.local.provision import create_base
from skinflint.local.stack import free_port
from tests.functional._deploy import publish_app
from tests.functional.conftest import API_KEY, two_module_app
from workers.runtimes import EmulatedRuntime
from workers.worker import Worker

pytestmark = pytest.mark.functional

REPO = Path(__file__).resolve().parents[2]


def chain_plan(det_batch: int, det_rate: float, det_d: float, car_d: float = 0.01) -> Plan:
    # detector: 1 machine, windows of det_batch / det_rate s; car: 1 machine, batch 2 at 12 req/s
    return Plan(
        objective="billed",
        cost_per_hour=1.0,
        billed_per_hour=1.0,
        solve_ms=0.0,
        modules={
            "detector": ModulePlan(
                latency_budget_s=1.0,
                worst_case_latency_s=det_batch / det_rate + det_d,
                groups=[
                    MachineGroup(
                        hardware="t4",
                        batch=det_batch,
                        machines=1,
                        rate_per_machine=det_rate,
                        duration_s=det_d,
                    )
                ],
            ),
            "car": ModulePlan(
                latency_budget_s=1.0,
                worst_case_latency_s=2 / 12 + car_d,
                groups=[
                    MachineGroup(hardware="t4", batch=2, machines=1, rate_per_machine=12.0, duration_s=car_d)
                ],
            ),
        },
    )


def worker_for(stack_like, dep, module: str, metrics=None, runtime=None, machine: int = 0, **kw) -> Worker:
    a = next(x for x in stack_like.assignments if (x.module, x.machine) == (module, machine))
    m = metrics if metrics is not None else stack_like.metrics
    return Worker(
        assignment=a,
        router=Router.for_deployment(dep),
        queues=stack_like.queues,
        results=stack_like.results,
        blobs=stack_like.blobs,
        metrics=m,
        runtime=runtime or EmulatedRuntime(a.model_s or a.duration_s, a.hardware),
        outcomes=FrameOutcomes(m),
        **kw,
    )


def front_for(stack_like, admission: Admission | None = None) -> FrontService:
    return FrontService(
        config=stack_like.cfg,
        store=stack_like.store,
        plans=stack_like.plans,
        results=stack_like.results,
        queues=stack_like.queues,
        blobs=stack_like.blobs,
        metrics=stack_like.metrics,
        admission=admission,
    )


def pump(worker: Worker, until: float, done) -> None:
    """Receive and run what is ready (the serve loop's path, failures included) until ``done()``."""
    while time.time() < until and not done():
        worker.poll_once(wait_s=0)
        with worker._lock:
            ready = worker.assembler.take_ready(time.time())
        for bid, items in ready:
            worker._process_logged(bid, items)
        time.sleep(0.02)


def frames_done(svc: FrontService, ids: list[str]) -> bool:
    return all(svc.result(rid).status != "queued" for rid in ids)


def jpeg(seed: int = 0) -> bytes:
    from tests.functional.conftest import jpeg_bytes

    return jpeg_bytes(seed=seed)


# -- an instance killed mid-batch (a real process, SIGKILL) -------------------------------------------


class _ServerStack:
    """moto's server in this process, the resources, and clients to it (for an instance agent
    subprocess)."""

    def __init__(self, port: int, plan: Plan, visibility_s: int):
        import boto3

        from core.adapters.blobs import BlobStore
        from core.adapters.queues import TaskQueues

        self.endpoint = f"http://127.0.0.1:{port}"
        self.cfg = DataPlaneConfig(endpoint_url=self.endpoint)
        self.ddb, self.sqs, s3 = (
            boto3.client(s, region_name="us-east-1", endpoint_url=self.endpoint)
            for s in ("dynamodb", "sqs", "s3")
        )
        create_base(self.ddb, s3, self.cfg)
        self.store = ConfigStore(self.ddb, self.cfg.config_table)
        self.store.put_api_key(API_KEY, "tests")
        self.plans = PlanStore(self.ddb, self.cfg.config_table)
        self.results = ResultStore(self.ddb, self.cfg.results_table)
        self.queues = TaskQueues(self.sqs)
        self.blobs = BlobStore(s3, self.cfg.bucket)
        self.metrics = MemoryMetrics()
        published = publish_app(
            self.plans,
            self.sqs,
            two_module_app(),
            plan,
            frame_rate=2.0,
            slo_s=20.0,
            emulated_hardware=["t4"],
            visibility_timeout_s=visibility_s,
        )
        self.deployment, self.assignments, self.dlq = (
            published.deployment,
            published.assignments,
            published.dlq,
        )


@pytest.fixture
def server_stack():
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        # detector: batch 2 at 2 req/s (1 s windows), each batch runs 1.5 s; redelivery after 2 s
        yield _ServerStack(port, chain_plan(det_batch=2, det_rate=2.0, det_d=1.5), visibility_s=2)
    finally:
        server.stop()


def _serving(s: _ServerStack, instance_id: str) -> bool:
    """The instance reported its slot served (its heartbeat follows the start of its shares)."""
    status = s.plans.instances().get(instance_id)
    return status is not None and status.state == "serving"


def test_an_instance_killed_mid_batch_loses_nothing(server_stack, tmp_path):
    s = server_stack
    det = next(a for a in s.assignments if a.module == "detector")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKINFLINT_")}
    env.update(s.cfg.to_env())
    env["SKINFLINT_MODEL_DIR"] = str(tmp_path / "no-models")  # every share emulated (t4 is, anyway)
    log = (tmp_path / "instance.log").open("wb")
    # the instance agent production runs: it claims the first free t4 slot of the version, t4/0,
    # which holds the detector's machine (car's is t4/1)
    command = [sys.executable, "-m", "workers.instance", "--hardware", "t4", "--instance-id", "i-kill"]
    proc = subprocess.Popen(
        [*command, "--no-lifecycle", "--poll-s", "0.2"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        end = time.time() + 20
        while not _serving(s, "i-kill"):
            assert proc.poll() is None and time.time() < end, (tmp_path / "instance.log").read_text()
            time.sleep(0.1)
        status = s.plans.instances()["i-kill"]
        assert status.slot == "t4/0" and list((status.model_extra or {})["shares"]) == [
            "traffic.detector.g0.m0"
        ]
        # GIVEN two frames in one detector window (one batch of two)
        svc = front_for(s)
        t = time.time()
        svc.clock = lambda: t
        frames = [(jpeg(0), "image/jpeg"), (jpeg(1), "image/jpeg")]
        ids = [a.request_id for a in svc.accept("traffic", frames).accepted]
        svc.clock = time.time
        window_end = Router.for_deployment(s.deployment).route("detector", t).window_end
        # WHEN the instance is SIGKILLed while the batch runs (window closed, 1.5 s batch not finished)
        time.sleep(max(0.0, window_end + 0.5 - time.time()))
        attrs = s.sqs.get_queue_attributes(QueueUrl=det.queue_url, AttributeNames=["All"])["Attributes"]
        # in the worker's hands: the POST's two frames travel in one message (core/wire.py)
        assert attrs["ApproximateNumberOfMessagesNotVisible"] == "1"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
        assert all(svc.result(r).tasks == [] for r in ids)  # nothing recorded: truly mid-batch
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        log.close()
    # THEN a replacement receives both after the visibility timeout and every frame is answered once
    fresh = worker_for(s, s.deployment, "detector", runtime=EmulatedRuntime(0.01, "t4"))
    car = worker_for(s, s.deployment, "car")
    end = time.time() + 15
    while time.time() < end and not frames_done(svc, ids):
        for w in (fresh, car):
            pump(w, time.time() + 0.05, lambda: False)
    for rid in ids:
        res = svc.result(rid)
        assert res.status == "done", res
        names = [t.task_id for t in res.tasks]
        assert len(names) == len(set(names)) and names.count("detector") == 1
    assert fresh.totals["ran"] == 2 and fresh.totals["duplicates"] == 0
    assert max(fresh._receives.values()) >= 2  # redelivered, not re-sent
    assert s.queues.depth(det.queue_url) == 0 and s.queues.depth(s.dlq) == 0
    assert s.metrics.total("SloAttainment") == 2  # both frames finished within the (20 s) SLO


def _agent(s: _ServerStack, tmp_path: Path, name: str, state_dir: Path) -> subprocess.Popen[bytes]:
    """``python -m workers.instance`` for ``i-kill`` (it claims t4/0: the detector's machine), its
    receipt journals under ``state_dir``, its log in ``tmp_path/name``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKINFLINT_")}
    env.update(s.cfg.to_env())
    env["SKINFLINT_MODEL_DIR"] = str(tmp_path / "no-models")
    env["SKINFLINT_STATE_DIR"] = str(state_dir)
    command = [sys.executable, "-m", "workers.instance", "--hardware", "t4", "--instance-id", "i-kill"]
    with (tmp_path / name).open("wb") as log:
        return subprocess.Popen(
            [*command, "--no-lifecycle", "--poll-s", "0.2"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


@pytest.fixture
def slow_visibility_stack():
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        # moto's servers in one process share their state: forget an earlier test's tables
        urllib.request.urlopen(
            urllib.request.Request(f"http://127.0.0.1:{port}/moto-api/reset", method="POST")
        )
        # as server_stack, with the queues' production visibility timeout: 30 s
        yield _ServerStack(port, chain_plan(det_batch=2, det_rate=2.0, det_d=1.5), visibility_s=30)
    finally:
        server.stop()


def test_an_agent_restarted_after_a_crash_releases_what_its_workers_held(slow_visibility_stack, tmp_path):
    s = slow_visibility_stack
    det = next(a for a in s.assignments if a.module == "detector")
    state = tmp_path / "state"
    proc = _agent(s, tmp_path, "first.log", state)
    again: subprocess.Popen[bytes] | None = None
    try:
        end = time.time() + 20
        while not _serving(s, "i-kill"):
            assert proc.poll() is None and time.time() < end, (tmp_path / "first.log").read_text()
            time.sleep(0.1)
        # GIVEN two frames in the detector worker's hands (a batch of two running for 1.5 s; one POST,
        # so one message of two tasks: core/wire.py)
        svc = front_for(s)
        t = time.time()
        svc.clock = lambda: t
        ids = [
            a.request_id
            for a in svc.accept("traffic", [(jpeg(0), "image/jpeg"), (jpeg(1), "image/jpeg")]).accepted
        ]
        svc.clock = time.time
        window_end = Router.for_deployment(s.deployment).route("detector", t).window_end
        time.sleep(max(0.0, window_end + 0.5 - time.time()))
        attrs = s.sqs.get_queue_attributes(QueueUrl=det.queue_url, AttributeNames=["All"])["Attributes"]
        assert attrs["ApproximateNumberOfMessagesNotVisible"] == "1"
        journals = list((state / "i-kill" / "receipts").glob("*.receipts"))
        assert len(journals) == 1 and journals[0].read_text().count("\n+ ") == 1
        # WHEN the agent is killed (SIGKILL: no drain, no release) and started again at once
        _kill(proc)
        restarted = time.time()
        again = _agent(s, tmp_path, "again.log", state)
        # THEN the restarted agent releases the message when it starts (visibility 0), receives
        # them and answers both frames long before the 30 s visibility timeout would have freed them
        car = worker_for(s, s.deployment, "car")
        end = restarted + 15
        while time.time() < end and not frames_done(svc, ids):
            pump(car, time.time() + 0.05, lambda: False)
        took = time.time() - restarted
        log = (tmp_path / "again.log").read_text()
        assert frames_done(svc, ids), log
        assert "released 1 message(s) the previous process held" in log
        for rid in ids:
            res = svc.result(rid)
            assert res.status == "done", res
            assert [task.task_id for task in res.tasks].count("detector") == 1
        # and the queue's depth (visible + in flight: what the front's backlog check reads) is 0
        # again once the deletes (which linger up to 1 s to share a batch) went out
        while s.queues.depth(det.queue_url) > 0 and time.time() < end:
            time.sleep(0.1)
        empty = time.time() - restarted
        assert took < 15 and empty < 15 and s.queues.depth(s.dlq) == 0, (took, empty)
        print(f"answered {took:.1f} s, queue empty {empty:.1f} s after the restart (visibility 30 s)")
    finally:
        _kill(proc)
        if again is not None:
            _kill(again)


# -- a worker dying in the middle of its result writes -----------------------------------------------


def solo_plan() -> Plan:
    # one module, no children: the detector's tasks are terminal, so its batches write the records
    return Plan(
        objective="billed",
        cost_per_hour=1.0,
        billed_per_hour=1.0,
        solve_ms=0.0,
        modules={
            "detector": ModulePlan(
                latency_budget_s=1.0,
                worst_case_latency_s=0.51,
                groups=[
                    MachineGroup(hardware="t4", batch=2, machines=1, rate_per_machine=4.0, duration_s=0.01)
                ],
            )
        },
    )


class DiesAfterFirstWrite(ResultStore):
    """Writes the record item of the batch's first POST, then dies before the next POST's (a
    ``BatchWriteItem`` that left an item unprocessed, and the process killed before its retry)."""

    def record_tasks(self, records):
        posts = list(dict.fromkeys(post_of(rec.request_id) for rec in records))
        first = super().record_tasks([rec for rec in records if post_of(rec.request_id) == posts[0]])
        if len(posts) > 1:
            raise SystemExit("killed between two result writes")
        return first


def test_a_worker_dying_mid_write_is_healed_by_redelivery_and_recorded_once(stack):
    # GIVEN an app of one module (its tasks are terminal: the worker writes their records), two
    # POSTs of one frame in one detector window (one batch, one record item per POST), and a
    # detector that dies after writing the first POST's record only
    app = AppSpec(name="solo", slo_s=2.0, modules={"detector": AppModuleSpec(model="det")}, edges=[])
    published = publish_app(
        stack.plans, stack.sqs, app, solo_plan(), 4.0, emulated_hardware=["t4"], visibility_timeout_s=1
    )
    stack.assignments = published.assignments
    dep = published.deployment
    svc = front_for(stack)
    t = time.time()
    svc.clock = lambda: t
    ids = [svc.accept("solo", [(jpeg(i), "image/jpeg")]).accepted[0].request_id for i in range(2)]
    svc.clock = time.time
    assert post_of(ids[0]) != post_of(ids[1])
    dying = worker_for(stack, dep, "detector")
    dying.results = DiesAfterFirstWrite(stack.ddb, stack.cfg.results_table)
    with pytest.raises(SystemExit):
        pump(dying, time.time() + 3, lambda: False)
    assert sum(len(svc.result(r).tasks) for r in ids) == 1
    # WHEN a fresh worker gets the redelivered batch (visibility timeout 1 s)
    fresh = worker_for(stack, dep, "detector")
    end = time.time() + 10
    pump(fresh, end, lambda: fresh.totals["ran"] + fresh.totals["dropped"] >= 2)
    # THEN the written task is a repeat (checked, not written again), the other is recorded, and
    # every frame is answered once: done, or -- on a loaded host, past its 2 s SLO -- dropped with
    # the reason
    assert (fresh.totals["ran"], fresh.totals["duplicates"]) == (2, 1)
    for rid in ids:
        res = svc.result(rid)
        assert res.status in ("done", "dropped"), res
        assert all(t.reason == "deadline" for t in res.tasks if t.status == "dropped")
        assert [t.task_id for t in res.tasks] == ["detector"]
        assert stack.results.recorded(post_of(rid)) == {(rid, "detector")}
    # AND no frame's outcome is counted twice: the repeat is not emitted again (the dead worker's
    # share, written but not emitted, is lost as every metric it buffered would be; the records,
    # which the sweeper accounts from, hold both frames)
    assert stack.metrics.weights("FramesFinished", App="solo") == 1
    assert stack.metrics.weights("SloAttainment", App="solo") == 1


# -- poison messages ---------------------------------------------------------------------------------


def _make_visible_at_once(stack, url: str) -> None:
    stack.sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "0"})


def _replace_message(stack, url: str, edit) -> dict:
    """Take the one message of ``url`` and put back ``edit(body)`` (a corrupted copy)."""
    (raw,) = stack.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)["Messages"]
    stack.sqs.delete_message(QueueUrl=url, ReceiptHandle=raw["ReceiptHandle"])
    body = json.loads(raw["Body"])
    stack.sqs.send_message(QueueUrl=url, MessageBody=json.dumps(edit(body)))
    return body


def test_an_unparseable_message_goes_to_the_dlq_after_five_receives_with_its_reason(stack):
    # GIVEN a frame whose detector message was corrupted (unknown schema version)
    svc = front_for(stack)
    (acc,) = svc.accept("traffic", [(jpeg(), "image/jpeg")]).accepted
    url = stack.deployment.queues["detector"]["0/0"]
    _replace_message(stack, url, lambda b: {**b, "v": 99})
    stack.sqs.send_message(QueueUrl=url, MessageBody="not even json {")
    _make_visible_at_once(stack, url)
    det = worker_for(stack, stack.deployment, "detector")
    # WHEN the worker receives them again and again
    for _ in range(8):
        det.poll_once(wait_s=0)
    # THEN both are counted on each of their 5 receives and then sit in the DLQ, the worker is fine,
    # and the frame's owner reads why its frame was dropped
    assert det.totals["poison"] == 10
    assert stack.metrics.total("PoisonMessages") == 10
    assert stack.queues.depth(url) == 0
    dlq = stack.sqs.receive_message(QueueUrl=stack.dlq, MaxNumberOfMessages=10)["Messages"]
    assert len(dlq) == 2
    res = svc.result(acc.request_id)
    assert res.status == "dropped"
    (task,) = res.tasks
    assert task.status == "dropped" and task.reason.startswith("poison: ") and "v" in task.reason
    assert stack.metrics.total("FramesDropped", App="traffic") == 1


def test_a_request_that_fails_every_time_is_dropped_with_the_reason_and_spares_its_batch_mates(stack):
    # GIVEN two frames in one batch, one of them pointing at a payload that is gone (each in its own
    # message, so the bad one's goes to the DLQ alone; tests/functional/test_worker_messages.py has
    # a failing task sharing its message)
    stack.queues.max_tasks_per_message = 1
    svc = front_for(stack)
    t = time.time() - 0.6  # accepted 0.6 s ago: its window (0.5 s) has closed, the 2 s SLO has not
    svc.clock = lambda: t
    good, bad = svc.accept("traffic", [(jpeg(0), "image/jpeg"), (jpeg(1), "image/jpeg")]).accepted
    url = stack.deployment.queues["detector"]["0/0"]
    raws = stack.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)["Messages"]
    for raw in raws:
        body = json.loads(raw["Body"])
        if body["request_id"] == bad.request_id:
            stack.sqs.delete_message(QueueUrl=url, ReceiptHandle=raw["ReceiptHandle"])
            gone = {"content_type": "image/jpeg", "size": 10, "s3_key": "frames/gone"}
            stack.sqs.send_message(QueueUrl=url, MessageBody=json.dumps({**body, "payload": gone}))
    _make_visible_at_once(stack, url)
    det = worker_for(stack, stack.deployment, "detector")
    # WHEN the worker runs the batch, and the failing request on each redelivery
    pump(det, time.time() + 10, lambda: stack.queues.depth(url) == 0)
    # (the good frame's detector task forwarded its cars: its result is recorded with theirs)
    cars = [worker_for(stack, stack.deployment, "car", machine=m) for m in (0, 1)]
    end = time.time() + 10
    while time.time() < end and not frames_done(svc, [good.request_id]):
        for w in cars:
            pump(w, time.time() + 0.05, lambda: False)
    # THEN the good frame ran despite its batch-mate; the bad one is dropped on its 5th receive with
    # the error, and its message went to the DLQ
    good_res = svc.result(good.request_id)
    assert good_res.status != "queued", good_res  # done, or past its 2 s SLO on a loaded host
    assert all(x.reason == "deadline" for x in good_res.tasks if x.status == "dropped")
    det_tasks = {
        r: [x for x in svc.result(r).tasks if x.module == "detector"]
        for r in (good.request_id, bad.request_id)
    }
    assert [x.status for x in det_tasks[good.request_id]] == ["done"]
    (failed,) = det_tasks[bad.request_id]
    assert failed.status == "dropped" and failed.reason.startswith("failed 5 times: BlobError")
    assert svc.result(bad.request_id).status == "dropped"
    dlq = stack.sqs.receive_message(QueueUrl=stack.dlq, MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(m["Body"])["request_id"] for m in dlq] == [bad.request_id]


# -- overload at twice the planned rate --------------------------------------------------------------


def test_overload_at_twice_the_planned_rate_is_shed_and_accepted_frames_meet_the_slo(stack):
    # GIVEN an app planned for 4 frames/s (detector windows of 0.25 s, the car machine sustains
    # 12 / 1.5 = 8 frames/s), SLO 1 s, the front with admission control and two real-time workers
    app = AppSpec(
        name="overload",
        slo_s=1.0,
        modules={"detector": AppModuleSpec(model="det"), "car": AppModuleSpec(model="car")},
        edges=[("detector", "car", 1.5)],
    )
    published = publish_app(
        stack.plans,
        stack.sqs,
        app,
        chain_plan(2, 8.0, 0.05),
        4.0,
        emulated_hardware=["t4"],
        visibility_timeout_s=5,
    )
    dep = published.deployment
    stack.assignments = published.assignments
    metrics = MemoryMetrics()
    stack.metrics = metrics
    svc = front_for(stack, Admission(AdmissionConfig(rate_headroom=0.25, burst_s=1.0)))
    client = TestClient(create_app(lambda: svc))
    workers = [worker_for(stack, dep, m, metrics=metrics, grace_s=0.02) for m in ("detector", "car")]
    threads = [threading.Thread(target=w.serve, daemon=True) for w in workers]
    for th in threads:
        th.start()
    try:
        # WHEN 8 frames/s arrive for 8 s
        rate, seconds = 8.0, 8.0
        statuses: list[int] = []
        ids: list[str] = []
        start = time.time()
        for k in range(int(rate * seconds)):
            time.sleep(max(0.0, start + k / rate - time.time()))
            r = client.post(
                "/v1/apps/overload/frames",
                content=jpeg(k),
                headers={"x-api-key": API_KEY, "content-type": "image/jpeg"},
            )
            statuses.append(r.status_code)
            if r.status_code == 202:
                ids.append(r.json()["accepted"][0]["request_id"])
            else:
                assert r.status_code == 503, r.text
                assert r.json()["error"] == "over_planned_rate" and r.json()["reason"]
                assert int(r.headers["Retry-After"]) >= 1
        results = []
        for rid in ids:
            r = client.get(f"/v1/requests/{rid}", params={"wait": 5}, headers={"x-api-key": API_KEY})
            results.append(r.json())
    finally:
        for w in workers:
            w.stop()
        for th in threads:
            th.join(timeout=10)
    # THEN about 5 frames/s were admitted (+ the 1 s burst), the rest shed with 503, no other 5xx,
    # and every accepted frame finished within the SLO
    shed = statuses.count(503)
    assert len(ids) + shed == len(statuses)
    assert 5 * seconds - 2 <= len(ids) <= 5 * seconds + 7, (len(ids), shed)
    assert metrics.total("FrontRejected", App="overload", Reason="over_planned_rate") == shed
    done = [r for r in results if r["status"] == "done"]
    assert len(done) == len(ids), [r for r in results if r["status"] != "done"]
    # within the SLO = finished by the frame's deadline, the criterion of the SloAttainment metric
    # (latency_s <= slo_s can disagree with it by float rounding for a frame finishing at the deadline)
    within = [r for r in done if r["finished_at"] <= r["deadline"]]
    assert len(within) >= 0.99 * len(ids)
    assert metrics.total("SloAttainment", App="overload") == len(within)
