# ruff: noqa: F811 - the fixture imported from the instance tests is the tests' parameter
"""Plan-version changes must not strand work (issue #28, item 1).

The path that stranded frames: an instance whose slot in the new version holds no share of an app
(it is idle, or its slot serves other apps) retires its old shares of that app but never learned
the new version's routing for it, so a batch it finishes after the activation forwards its
children to the superseded version's child queues. The old child worker (on another instance)
has retired once its queue was empty: nothing consumes those messages, and the garbage collector
kept the version forever waiting for them to drain. Two guards: the agent forwards with the new
version's routing for every app it still serves, and the collector moves the messages of a
superseded queue that no live instance consumes to the current version's queues."""

from __future__ import annotations

import time

import pytest

import tests.functional.test_instance as instance_tests
from control.gc import GcConfig, collect
from core.routing import Router
from core.schema import Payload
from planner.packing import FleetPlan, Instance, plan_shares
from tests.functional.test_instance import T4, env, plan, wait_for  # noqa: F401 - fixture
from workers.agent import InstanceAgent
from workers.lifecycle import DrainNotice
from workers.runtimes import EmulatedRuntime
from workers.shares import RuntimeCache

pytestmark = pytest.mark.functional

SLOW_DETECTOR_S = 2.0  # s the detector's batch runs on instance A: its children leave after the switch


def split_fleet(p):
    """v1: the detector alone on slot t4/0, the car machines on slot t4/1."""
    shares = plan_shares("traffic", p)
    return FleetPlan(
        instances=[
            Instance(slot="t4/0", hardware="t4", shares=[s for s in shares if s.module == "detector"]),
            Instance(slot="t4/1", hardware="t4", shares=[s for s in shares if s.module == "car"]),
        ],
        prices={"t4": T4},
        occupancy_per_hour=1.0,
        dedicated_per_hour=len(shares) * T4,
    )


def merged_fleet(p):
    """v2: every share on slot t4/1 (the instance that held t4/0 is left without a slot)."""
    return FleetPlan(
        instances=[Instance(slot="t4/1", hardware="t4", shares=plan_shares("traffic", p))],
        prices={"t4": T4},
        occupancy_per_hour=1.0,
        dedicated_per_hour=3 * T4,
    )


def gc_moving(env):
    """A collector pass as the control loop runs it: stranded messages are moved."""
    return collect(
        env.plans, env.sqs, env.queues.depth, time.time(), GcConfig(keep_previous_s=0.0), tasks=env.queues
    )


def car_queues(env, version: int) -> list[str]:
    return sorted(env.plans.deployment(version, "traffic").queues["car"].values())


def depth(env, url: str) -> int:
    return env.queues.depth(url)


@pytest.mark.parametrize("guard", ["agent", "collector"])
def test_children_of_a_batch_finished_after_the_switch_reach_a_served_queue(env, monkeypatch, guard):
    if guard == "collector":  # the agent as it was (old routing kept): the collector alone must save them
        monkeypatch.setattr(
            InstanceAgent, "_forward_router", lambda self, app, pending: pending.routers.get(app)
        )
    # GIVEN v1 with the detector on instance A (slow: 2 s a batch) and the cars on instance B; an
    # SLO long enough that a frame the collector moves late on a loaded host is still in time (what
    # is tested is where the children go, not how fast the test host runs the collector)
    env.slo_s = 30.0
    monkeypatch.setattr(instance_tests, "one_instance_fleet", split_fleet)
    env.publish(plan(detector_batch=4), changed=["detector", "car"])
    a, b = env.agent("i-a"), env.agent("i-b")
    a.runtimes = RuntimeCache(
        lambda x: EmulatedRuntime(SLOW_DETECTOR_S if x.module == "detector" else x.duration_s, x.hardware)
    )
    a.slot, b.slot = "t4/0", "t4/1"  # the slots they served before (what each claim prefers)
    a.step()
    b.step()
    assert a.slot == "t4/0" and b.slot == "t4/1"
    # three frames reach the v1 detector; its window closes within 1 s and the batch runs 2 s
    ids = env.send(3)
    wait_for(lambda: a._runners[0].worker.totals["ran"] == 0 and not a._runners[0].worker.idle(), what="held")
    # WHEN v2 (fresh queues, every share on B's slot) activates at once
    monkeypatch.setattr(instance_tests, "one_instance_fleet", merged_fleet)
    m2 = env.publish(plan(detector_batch=2), changed=["detector", "car"])
    v1_cars = car_queues(env, 1)
    end, moved = time.time() + 25, 0
    while time.time() < end:
        b.step()  # B first: it takes t4/1 of v2, A finds no slot and only retires its v1 share
        a.step()
        if guard == "collector":
            moved += gc_moving(env).moved
        else:  # the collector without moving: the agent's routing alone must be enough
            collect(env.plans, env.sqs, env.queues.depth, time.time(), GcConfig(keep_previous_s=0.0))
        res = {rid: env.results.get_request(rid) for rid in ids}
        if all(r is not None and r.status != "queued" for r in res.values()):
            break
        time.sleep(0.1)
    assert a.slot is None and b.version == m2.version
    assert (moved > 0) == (guard == "collector")  # the old agent's children were stranded, then moved
    # THEN every frame was answered, and nothing is left in the superseded car queues
    res = {rid: env.results.get_request(rid) for rid in ids}
    assert all(r is not None and r.status == "done" for r in res.values()), {
        rid: None if r is None else r.status for rid, r in res.items()
    }
    assert all(depth(env, url) == 0 for url in v1_cars if url in env.sqs.list_queues().get("QueueUrls", []))
    for agent in (a, b):
        agent.request_drain(DrainNotice("sigterm", time.time()))
        agent.drain(DrainNotice("sigterm", time.time()))


def test_gc_moves_the_messages_of_a_superseded_queue_nobody_consumes(env):
    # GIVEN v1 and v2 (fresh car queues), and v1 car requests sent after every v1 consumer retired
    env.publish(plan(detector_batch=4), changed=["detector", "car"])
    m2 = env.publish(plan(detector_batch=2), changed=["detector", "car"])
    router = Router.for_deployment(env.plans.deployment(1, "traffic"))
    now = time.time()
    accepted = env.send(2)  # two frames accepted (v2): their car requests go astray by hand below
    sends: dict[str, list] = {}
    for i, rid in enumerate(accepted):
        route = router.route("car", now)
        rec = env.results.get_request(rid)
        assert rec is not None
        msg = router.task(
            route,
            request_id=rid,
            task_id=f"detector/car.{i}",
            accepted_at=now,
            enqueued_at=now,
            deadline=now + 30,
            payload=Payload(content_type="image/jpeg", size=1, inline_b64="AA=="),
        )
        sends.setdefault(route.queue_url, []).append(msg)
    env.queues.send_many(sends)
    stranded = sorted(sends)
    assert sum(depth(env, url) for url in stranded) == 2
    # WHEN the collector runs (no instance serves v1)
    report = gc_moving(env)
    # THEN the two requests now wait in v2's car queues, re-routed for v2, and v1 is kept until the
    # old queues are seen empty, then deleted
    v2_cars = car_queues(env, m2.version)
    assert report.moved == 2, report.as_json()
    assert sum(depth(env, url) for url in v2_cars) == 2
    got = [m for url in v2_cars for m in env.queues.receive(url, max_messages=10, wait_s=0)]
    msgs = [task for m in got for task in m.messages()]
    assert {m.deployment_version for m in msgs} == {m2.version}
    assert {m.request_id for m in msgs} == set(accepted)
    gc_moving(env)
    assert env.plans.manifest(1) is None and not any(
        url in env.sqs.list_queues().get("QueueUrls", []) for url in stranded
    )


def test_gc_moves_each_task_of_a_multi_task_message_and_leaves_a_mixed_one_whole(env):
    # GIVEN v1 and v2, and on one v1 car queue two messages nobody consumes: one of three car tasks,
    # and one of a car task with a task of a module v2 does not plan (a ghost)
    env.publish(plan(detector_batch=4), changed=["detector", "car"])
    m2 = env.publish(plan(detector_batch=2), changed=["detector", "car"])
    router = Router.for_deployment(env.plans.deployment(1, "traffic"))
    now = time.time()
    accepted = env.send(4)
    route = router.route("car", now)

    def car(i: int, module: str = "car"):
        return router.task(
            route,
            request_id=accepted[i],
            task_id=f"detector/{module}.{i}",
            accepted_at=now,
            enqueued_at=now,
            deadline=now + 30,
            payload=Payload(content_type="image/jpeg", size=1, inline_b64="AA=="),
        ).model_copy(update={"module": module})

    url = route.queue_url
    env.queues.send(url, [car(0), car(1), car(2)])
    env.queues.send(url, [car(3), car(3, "ghost")])
    assert env.queues.depth_messages(url) == 2
    # WHEN the collector runs (no instance serves v1)
    report = gc_moving(env)
    # THEN the three car tasks were moved, re-routed for v2; the mixed message stays whole where it is
    assert (report.moved, report.unmovable) == (3, 2), report.as_json()
    v2_cars = car_queues(env, m2.version)
    got = [m for u in v2_cars for m in env.queues.receive(u, max_messages=10, wait_s=0)]
    moved = [task for m in got for task in m.messages()]
    assert sorted(t.task_id for t in moved) == [f"detector/car.{i}" for i in range(3)]
    assert {t.deployment_version for t in moved} == {m2.version}
    assert env.queues.depth_messages(url) == 1  # not deleted (in flight until its visibility runs out)
