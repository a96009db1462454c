# ruff: noqa: F811 - the fixture imported from the instance tests is the tests' parameter
"""The stranded-frame sweeper against moto (issue #28): every accepted frame past its deadline is
answered or dropped with a reason, and ``FramesUnaccounted`` counts any that is neither."""

from __future__ import annotations

import time

import pytest

from control.sweeper import STRANDED, SweepConfig, sweep
from core.adapters.metrics import MemoryMetrics
from core.adapters.outcomes import FrameOutcomes
from core.adapters.results import DUE_BUCKET_S, TaskRecord, due_bucket
from tests.functional.test_instance import env, plan  # noqa: F401 - fixture

pytestmark = pytest.mark.functional

CFG = SweepConfig(grace_s=120.0)


def done(rid: str, task: str = "detector", children: tuple[str, ...] = ()) -> TaskRecord:
    now = time.time()
    return TaskRecord(
        rid,
        task,
        task.rsplit("/", 1)[-1].split(".", maxsplit=1)[0],
        "done",
        "t4",
        True,
        now,
        now,
        now,
        1,
        children,
    )


def test_sweeper_accounts_for_every_frame_past_its_deadline_once(env):
    # GIVEN three accepted frames: one answered (outcome claimed by its worker), one answered whose
    # outcome check was lost, one whose car request was lost (its parent lists it, nothing recorded it)
    env.publish(plan(), changed=["detector", "car"])
    answered, lost_check, stranded = env.send(3)
    outcomes = FrameOutcomes(env.ddb, env.cfg.results_table, MemoryMetrics())
    env.results.record_tasks([done(answered)])
    assert outcomes.observe([done(answered)]) == 1
    env.results.record_tasks([done(lost_check)])
    env.results.record_tasks([done(stranded, children=("detector/car.0",))])
    deadline = env.results.get_request(stranded).deadline
    assert env.results.get_request(stranded).status == "queued"
    # WHEN the sweep runs once every deadline is past the grace
    metrics = MemoryMetrics()
    later = (due_bucket(deadline) + 1) * DUE_BUCKET_S + CFG.grace_s + 1
    report = sweep(env.results, metrics, None, later, CFG)
    # THEN the three are accounted for: two answered, one dropped as stranded, none unaccounted
    assert report.buckets[-1] == due_bucket(deadline) and report.next_bucket == due_bucket(deadline) + 1
    assert (report.accepted, report.answered, report.dropped, report.stranded) == (3, 2, 1, 1)
    assert report.unaccounted == [] and report.settled == 2
    assert metrics.total("FramesUnaccounted") == 0 and metrics.total("FramesStranded", App="traffic") == 1
    got = env.results.get_request(stranded)
    assert got.status == "dropped"
    assert [(t.task_id, t.status, t.reason) for t in got.tasks if t.status == "dropped"] == [
        ("detector/car.0", "dropped", STRANDED)
    ]
    assert env.results.get_request(lost_check).status == "done"
    # the settled frames' outcomes were emitted once, as a worker emits them
    assert metrics.total("FramesDropped", App="traffic") == 1
    assert len(metrics.values("SloAttainment", App="traffic")) == 2
    # AND a second sweep of the same minutes (a lost cursor) changes nothing and emits nothing again
    again = MemoryMetrics()
    report = sweep(env.results, again, None, later, CFG)
    assert (report.accepted, report.answered, report.dropped, report.stranded, report.settled) == (
        3,
        2,
        1,
        0,
        0,
    )
    assert again.total("FramesUnaccounted") == 0 and again.values("SloAttainment", App="traffic") == []
    # AND a late worker that processes the lost request finds it recorded (a duplicate, not overwritten)
    fresh, repeats = env.results.record_tasks([done(stranded, "detector/car.0")])
    assert fresh == [] and len(repeats) == 1
    assert env.results.get_request(stranded).status == "dropped"


def test_sweeper_leaves_minutes_not_due_and_resumes_from_its_cursor(env):
    env.publish(plan(), changed=["detector", "car"])
    (rid,) = env.send(1)
    deadline = env.results.get_request(rid).deadline
    bucket = due_bucket(deadline)
    # before the grace has passed for the whole minute, the frame's minute is not swept
    early = sweep(env.results, MemoryMetrics(), None, deadline + 1, CFG)
    assert bucket not in early.buckets and early.accepted == 0
    assert env.results.get_request(rid).status == "queued"
    # from the cursor, at most the due minutes; the frame is then accounted for
    later = (bucket + 1) * DUE_BUCKET_S + CFG.grace_s + 1
    report = sweep(env.results, MemoryMetrics(), early.next_bucket, later, CFG)
    assert report.buckets[-1] == bucket and (report.accepted, report.stranded) == (1, 1)
    assert env.results.get_request(rid).status == "dropped"
