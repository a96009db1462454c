"""The planner dies mid-write on the running local stack: workers keep serving the last good version.

Real processes: moto's server, the front under uvicorn, the emulated fleet's instance agents; the
planner's epoch runs in process (what the planner Lambda runs), here only when the test calls it
(the stack's timer is off) so each fault hits exactly one epoch. Frames stream at the planned rate
throughout while:

1. the app is re-registered with re-measured profiles, so the next epoch has a new version (with
   fresh queues) to write;
2. that epoch's process dies once the first of the version's items is written (before its manifest
   and the pointer flip): nothing after that point runs, nothing is emitted;
3. the retry writes every item and the manifest, then DynamoDB fails the pointer flip: the epoch
   reports ``failed`` and ``PlanningFailures`` = 1 reaches CloudWatch;
4. the next epoch publishes a fresh version, GC deletes the unflipped one and sweeps both dead
   versions' queues, and the instances take the new version up.

The faults are injected at the AWS boundary: the controller's plan store (a constructor parameter
of ``Controller``) is given a DynamoDB client whose writes of a new version die or fail on cue."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from control.service import Registrar
from core.adapters.plan_store import PlanStore
from core.clients import make_client
from core.schema import ResultOut
from core.settings import DataPlaneConfig
from skinflint.local.stack import LocalStack, StackConfig, registration_doc
from skinflint.local.summary import summarise
from skinflint.local.video import synthetic_frames
from tests.e2e.test_local_stack import RATE, SLO_S, stub_plan

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

POINTER = "plan#current"


class PlannerKilled(BaseException):
    """The planner's process dies (a Lambda timeout, an OOM kill): no handler of the epoch runs."""


def version_of(pk: str) -> int:
    return int(pk.split("#")[1].removeprefix("v"))  # plan#v00000007#... -> 7


class DyingWriter:
    """The planner's DynamoDB client, except for the writes of a version newer than ``in_force``:
    once ``items_before_death`` of its items are written the planner dies, and with ``fail_flip``
    DynamoDB fails the pointer's flip to it. Thread-safe: ``publish`` writes items in parallel."""

    def __init__(self, real: Any, in_force: int) -> None:
        self._real = real
        self._in_force = in_force
        self._lock = threading.Lock()
        self.items_before_death: int | None = None
        self.fail_flip = False
        self.written: list[str] = []  # keys of the new versions' items written through this client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def put_item(self, **kw: Any) -> Any:
        item = kw["Item"]
        pk = item["pk"]["S"]
        if pk == POINTER and self.fail_flip and int(item["version"]["N"]) > self._in_force:
            raise ClientError(
                {"Error": {"Code": "InternalServerError", "Message": "injected: flip failed"}}, "PutItem"
            )
        if pk.startswith("plan#v") and "#claim#" not in pk and version_of(pk) > self._in_force:
            with self._lock:
                if self.items_before_death is not None and len(self.written) >= self.items_before_death:
                    raise PlannerKilled(f"killed before writing {pk}")
                self.written.append(pk)
        return self._real.put_item(**kw)


class Camera:
    """Posts one frame every 1/RATE s on an absolute clock until stopped; keeps (sent at, status,
    request id or the error) of every frame. A transport error is recorded as status 0."""

    def __init__(self, url: str, key: str) -> None:
        self._client = httpx.Client(base_url=url, timeout=30)
        self._key = key
        self._frames = synthetic_frames(20)
        self._stop = threading.Event()
        self.sent: list[tuple[float, int, str]] = []
        self._thread = threading.Thread(target=self._run, name="camera", daemon=True)

    def _run(self) -> None:
        start = time.time()
        k = 0
        while not self._stop.wait(max(0.0, start + k / RATE - time.time())):
            at = time.time()
            try:
                r = self._client.post(
                    "/v1/apps/traffic/frames",
                    content=self._frames[k % len(self._frames)],
                    headers={"x-api-key": self._key, "content-type": "image/jpeg"},
                )
                body = r.json()
                got = body["accepted"][0]["request_id"] if r.status_code == 202 else body.get("error", "")
                self.sent.append((at, r.status_code, got))
            except (httpx.HTTPError, ValueError) as exc:
                self.sent.append((at, 0, f"{type(exc).__name__}: {exc}"))
            k += 1

    def __enter__(self) -> Camera:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._client.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=40)

    def accepted(self, since: float = 0.0, until: float = float("inf")) -> list[str]:
        return [rid for at, code, rid in self.sent if code == 202 and since < at < until]

    def results(self) -> dict[str, ResultOut]:
        """Every accepted frame's result (waiting up to 10 s for each)."""
        out = {}
        for rid in self.accepted():
            r = self._client.get(f"/v1/requests/{rid}", params={"wait": 10}, headers={"x-api-key": self._key})
            out[rid] = ResultOut.model_validate(r.json())
        return out


def wait_for(cond: Any, timeout_s: float, what: str) -> None:
    end = time.time() + timeout_s
    while time.time() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def serving(store: PlanStore, version: int) -> bool:
    """Every live instance's heartbeat names ``version`` (a surplus one idles on it) and some serve."""
    beats = [b for b in store.instances().values() if b.state in ("serving", "idle")]
    return any(b.state == "serving" for b in beats) and all(b.version == version for b in beats)


def remeasured(doc: dict[str, Any], slower_s: float) -> dict[str, Any]:
    """``doc`` with every profile entry ``slower_s`` slower (a new measurement of the models)."""
    profiles = {
        model: [{**e, "duration_s": e["duration_s"] + slower_s} for e in entries]
        for model, entries in doc["profiles"].items()
    }
    return {**doc, "profiles": profiles}


def queues_of(sqs: Any, version: int) -> list[str]:
    """The names of the task queues created for ``version``."""
    urls = sqs.list_queues(QueueNamePrefix="skinflint-").get("QueueUrls", [])
    return sorted(n for u in urls if f"-v{version}-" in (n := u.rsplit("/", 1)[-1]))


def planning_failures(cw: Any, namespace: str, since: float) -> list[float]:
    """The epochs' PlanningFailures values (no dimensions) since ``since``, oldest first (one
    second per datapoint: the epochs are seconds apart)."""
    got = cw.get_metric_data(
        MetricDataQueries=[
            {
                "Id": "f",
                "MetricStat": {
                    "Metric": {"Namespace": namespace, "MetricName": "PlanningFailures"},
                    "Period": 1,
                    "Stat": "Sum",
                },
            }
        ],
        StartTime=since,
        EndTime=time.time() + 5,
        ScanBy="TimestampAscending",
    )
    return list(got["MetricDataResults"][0]["Values"])


def plan_items(ddb: Any, table: str, *versions: int) -> list[str]:
    prefixes = tuple(f"plan#v{v:08d}#" for v in versions)
    pages = ddb.get_paginator("scan").paginate(TableName=table, ProjectionExpression="pk")
    return sorted(k for page in pages for it in page["Items"] if (k := it["pk"]["S"]).startswith(prefixes))


def test_the_planner_dying_mid_write_leaves_workers_serving_the_last_good_version(tmp_path):
    stack = LocalStack(
        ["traffic"],
        stub_plan,
        log_dir=str(tmp_path),
        config=StackConfig(timer=False, activate_lead_s=2.0),
        log=print,
    )
    with stack as info, Camera(info.url, info.api_key) as camera:
        ctl, store = stack.controller, stack.plan_store
        assert ctl is not None and store is not None
        ctl.config = dataclasses.replace(ctl.config, min_gap_s=0.0)  # epochs seconds apart
        cfg = DataPlaneConfig(endpoint_url=info.endpoint_url)
        ddb, sqs, cw = (make_client(s, cfg) for s in ("dynamodb", "sqs", "cloudwatch"))
        good = info.version
        # GIVEN the app is re-registered with re-measured profiles: every module's machine group
        # changes (its duration), so the next epoch writes a version with fresh queues
        registrar = Registrar(
            ctl.registry, ctl.states, ctl.catalog, lambda _m: None, overhead_s=ctl.config.hop_overhead_s
        )
        registrar.register(remeasured(registration_doc(info.plans["traffic"]), slower_s=0.001))
        writer = DyingWriter(ddb, in_force=good)
        healthy, ctl.plans = ctl.plans, PlanStore(writer, cfg.config_table)
        time.sleep(1.0)  # frames flowing on the last good version

        # WHEN the planner dies once the first of the new version's items is written
        writer.items_before_death = 1
        died_at = time.time()
        with pytest.raises(PlannerKilled):
            stack.run_epoch("dies mid-write")
        (first,) = writer.written
        dead = version_of(first)
        # THEN the pointer still names the last good version; the half-written one is unreachable
        dead_queues = queues_of(sqs, dead)
        assert dead_queues  # created before the version was written
        assert store.current().version == good < dead  # type: ignore[union-attr]
        assert store.manifest(dead) is None and dead not in store.versions()
        time.sleep(2.0)
        assert serving(store, good)

        # WHEN the retry writes every item and the manifest, and then the pointer flip fails
        writer.items_before_death, writer.fail_flip = None, True
        del writer.written[:]
        failed = stack.run_epoch("flip fails")
        unflipped = version_of(writer.written[-1])
        dead_queues += queues_of(sqs, unflipped)
        # THEN the epoch reports the failure and the last good version stays in force
        assert failed["status"] == "failed" and "flip failed" in failed["error"], failed
        assert failed["version"] == good < dead < unflipped
        assert writer.written[-1] == f"plan#v{unflipped:08d}#manifest"
        assert store.current().version == good  # type: ignore[union-attr]
        assert unflipped in failed["gc"]["kept_versions"]  # complete, never named: a writer in progress
        time.sleep(2.0)
        assert serving(store, good)

        # WHEN the next epoch runs with a healthy store
        ctl.plans = healthy
        published = stack.run_epoch("recovers")
        recovered_at = time.time()
        # THEN it publishes a fresh version; GC deletes the unflipped one and the dead versions' queues
        new = int(published["version"])
        assert published["status"] == "published" and published["previous"] == good and new > unflipped
        assert unflipped in published["gc"]["deleted_versions"] and store.versions() == [good, new]
        assert queues_of(sqs, dead) == queues_of(sqs, unflipped) == [] and queues_of(sqs, new)
        # and the instances take it up
        wait_for(lambda: serving(store, new), 60, f"the instances on v{new}")
        leftovers = plan_items(ddb, cfg.config_table, dead, unflipped)
        failures = planning_failures(cw, cfg.metrics_namespace, died_at)
        camera.stop()
        results = camera.results()
    codes = [code for _, code, _ in camera.sent]
    shed = [(code, why) for _, code, why in camera.sent if code != 202]
    after_fault = camera.accepted(died_at, recovered_at)
    s = summarise(len(results), list(results.values()), info.plans["traffic"].plan, SLO_S, ["t4"])
    print(
        f"planner fault: v{good} kept serving through a death after writing {first} and a failed "
        f"flip of v{unflipped}; v{new} published; {len(codes)} frames posted, {codes.count(202)} "
        f"accepted, {len(after_fault)} of them between the fault and the recovery, refused {shed}; "
        f"{len(dead_queues)} queues of the dead versions swept; {s['answered']} done, {s['dropped']} "
        f"dropped, {s['lost']} lost, SLO attainment {s['slo_attainment']:.2%}; PlanningFailures since "
        f"the fault {failures}; items of the dead versions left: {leftovers}"
    )
    # THEN the dead epoch emitted nothing (deployed, the alarm counts missing data as breaching), the
    # failed one PlanningFailures = 1, the next 0
    assert failures == [1.0, 0.0], failures
    # every frame was answered: accepted, or refused on purpose (admission control sheds a few
    # with a reason on a loaded host: docs/loadtest.md)
    assert codes and all(code in (202, 429, 503) for code in codes), shed
    # the frames accepted between the fault and the recovery (4 s of video and three epochs) were
    # served by the last good version's workers, and no accepted frame was lost
    assert len(after_fault) >= 2 * RATE
    assert all(results[rid].status != "queued" for rid in after_fault)
    assert sum(results[rid].status == "done" for rid in after_fault) >= 0.9 * len(after_fault)
    assert s["lost"] == 0 and s["answered"] + s["dropped"] == len(results), s
    assert s["slo_attainment"] >= 0.9, s
    # nothing of the unflipped version is left. The dead writer's items (no manifest) are not
    # listed, never read and never collide: version numbers come from an atomic counter
    assert all(version_of(k) == dead for k in leftovers), leftovers
