# ruff: noqa: F811 - the fixture imported from the instance tests is the tests' parameter
"""Garbage collection against what instances still serve (moto, the real plan store and agent).

During a version change an instance serves shares of two versions: it starts the new version's
shares, then drains the superseded version's. Its heartbeat lists every version it still serves,
and GC keeps each of them (and their queues) until the old share has retired. A share whose queue
is deleted under it anyway stops once and is accounted for, never restarted in a loop."""

from __future__ import annotations

import json
import logging
import time

import pytest

from control.gc import GcConfig, collect
from tests.functional.test_instance import env, plan, run_in_thread, wait_for  # noqa: F401 - fixture
from workers.lifecycle import DrainNotice

pytestmark = pytest.mark.functional

NO_PREVIOUS = GcConfig(keep_previous_s=0.0)  # the previous version is kept only if an instance serves it


def gc(env):
    return collect(env.plans, env.sqs, env.queues.depth, time.time(), NO_PREVIOUS)


def exists(env, url: str) -> bool:
    return url in env.sqs.list_queues(QueueNamePrefix="skinflint-").get("QueueUrls", [])


def detector_queue(env, version: int) -> str:
    return env.plans.deployment(version, "traffic").queues["detector"]["0/0"]


def beat_raw(env, doc: dict) -> None:
    """A heartbeat item as written by an agent of any age (an old one has no serving_versions)."""
    env.ddb.put_item(
        TableName=env.cfg.config_table,
        Item={"pk": {"S": f"instance#{doc['instance_id']}"}, "doc": {"S": json.dumps(doc)}},
    )


def test_gc_keeps_every_version_an_instance_reports_and_reads_old_heartbeats(env):
    env.publish(plan(detector_batch=4), changed=["detector", "car"])
    env.publish(plan(detector_batch=2), changed=["detector"])  # v2, active at once
    q1, q2 = detector_queue(env, 1), detector_queue(env, 2)
    base = {"instance_id": "i-old", "hardware": "t4", "slot": "t4/0", "state": "serving"}
    # an old-format heartbeat (``version`` only) still keeps the version it names
    beat_raw(env, base | {"version": 1, "at": time.time()})
    assert env.plans.instances()["i-old"].served_versions() == {1}
    report = gc(env)
    assert report.kept == [1, 2] and report.deleted_versions == [] and exists(env, q1)
    # a heartbeat naming only the newest version is what lost the old queues before
    beat_raw(env, base | {"version": 2, "at": time.time()})
    assert gc(env).kept == [2]
    # a heartbeat listing both versions keeps both (v3 is published meanwhile)
    env.publish(plan(detector_batch=1), changed=["detector"])
    beat_raw(env, base | {"version": 3, "serving_versions": [2, 3], "at": time.time()})
    report = gc(env)
    assert report.kept == [2, 3] and exists(env, q2)
    # a stale or gone instance keeps nothing
    beat_raw(env, base | {"version": 3, "serving_versions": [2, 3], "at": time.time() - 600})
    report = gc(env)
    assert report.kept == [3] and report.deleted_versions == [2] and not exists(env, q2)


def test_gc_keeps_the_superseded_version_while_a_share_of_it_drains(env, caplog):
    caplog.set_level(logging.INFO)
    # GIVEN an instance serving v1 (detector batch 4, two car machines)
    env.publish(plan(detector_batch=4), changed=["detector", "car"])
    a = env.agent("i-a")
    a.retire_grace_s = 3.0  # old shares serve 3 s past the activation (the drain GC must not cut)
    ta = run_in_thread(a)
    wait_for(lambda: a.state == "serving", what="serving v1")
    ids = env.send(2)
    # WHEN v2 changes the detector (fresh queue) and activates 0.5 s later
    m2 = env.publish(plan(detector_batch=2), changed=["detector"], activate_in=0.5)
    q1, q2 = detector_queue(env, 1), detector_queue(env, m2.version)
    wait_for(lambda: a.version == m2.version and not a._pending, what="v2 adopted and active")
    old = next(r for r in a._runners if r.share.module == "detector" and r.version == 1)
    assert old.retiring and old.thread.is_alive()
    wait_for(
        lambda: env.plans.instances()["i-a"].served_versions() == {1, m2.version},
        timeout_s=3,
        what="a heartbeat listing both versions",
    )
    ids += env.send(2)
    # THEN GC after the activation keeps v1 (the instance still serves a v1 share) and its queue
    report = gc(env)
    assert 1 in report.kept and 1 not in report.deleted_versions, report.as_json()
    assert exists(env, q1) and env.plans.manifest(1) is not None
    assert old.thread.is_alive() and not old.worker.queue_gone
    # once the v1 share has retired and said so, v1 and its own queue go; the car queues, which
    # v2 took over unchanged, stay
    wait_for(lambda: old not in a._runners, timeout_s=8, what="the v1 detector retires")
    wait_for(
        lambda: env.plans.instances()["i-a"].served_versions() == {m2.version},
        timeout_s=3,
        what="a heartbeat without v1",
    )
    report = gc(env)
    assert report.deleted_versions == [1] and q1 in report.deleted_queues
    assert not exists(env, q1) and exists(env, q2)
    assert all(exists(env, u) for u in env.plans.deployment(m2.version, "traffic").queues["car"].values())
    # no share ever found its queue gone, and every frame across the change was answered
    assert not [r for r in caplog.records if "no longer exists" in r.getMessage()]
    res = env.wait_done(ids, 10)
    assert all(r is not None and r.status == "done" for r in res.values()), res
    a.request_drain(DrainNotice("sigterm", time.time()))
    ta.join(10)


def test_a_share_whose_queue_is_deleted_stops_once_and_is_accounted_for(env, caplog):
    caplog.set_level(logging.INFO)
    env.publish(plan(detector_batch=4), changed=["detector", "car"])
    a = env.agent("i-a")
    ta = run_in_thread(a)
    wait_for(lambda: a.state == "serving" and len(a._runners) == 3, what="serving v1")
    # WHEN the detector's queue is deleted under it (an older planner's GC, an operator)
    env.sqs.delete_queue(QueueUrl=detector_queue(env, 1))
    wait_for(lambda: len(a._runners) == 2, timeout_s=6, what="the detector share stops")
    # THEN the agent reports it, keeps the other shares and does not restart it on the missing queue
    wait_for(lambda: a.heartbeats[-1]["lost_shares"] == ["traffic.detector.g0.m0"], what="reported")
    time.sleep(1.0)
    assert len(a._runners) == 2 and all(r.thread.is_alive() for r in a._runners)
    assert not [r for r in caplog.records if "stopped unexpectedly" in r.getMessage()]
    assert len([r for r in caplog.records if "no longer exists" in r.getMessage()]) == 1
    # and a new version that gives the detector a fresh queue serves it again
    m2 = env.publish(plan(detector_batch=2), changed=["detector"], activate_in=0.2)
    wait_for(lambda: a.version == m2.version and len(a._runners) == 3, what="v2 detector started")
    wait_for(lambda: a.heartbeats[-1]["lost_shares"] == [], what="nothing lost any more")
    wait_for(lambda: env.front.router("traffic").deployment.version == m2.version, what="front on v2")
    res = env.wait_done(env.send(2), 10)
    assert all(r is not None and r.status == "done" for r in res.values()), res
    a.request_drain(DrainNotice("sigterm", time.time()))
    ta.join(10)
