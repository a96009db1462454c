# ruff: noqa: F811 - the fixture imported from the instance tests is the tests' parameter
"""The stranded-frame sweeper against moto (issue #28): every accepted frame past its deadline is
answered or dropped with a reason, and ``FramesUnaccounted`` counts any that is neither."""

from __future__ import annotations

import time

import pytest

from control.sweeper import STRANDED, SweepConfig, sweep
from core.adapters.metrics import MemoryMetrics
from core.adapters.results import DUE_BUCKET_S, TaskRecord, due_bucket
from tests.functional.test_instance import env, plan  # noqa: F401 - fixture

pytestmark = pytest.mark.functional

CFG = SweepConfig(grace_s=120.0)


def done(rid: str, task: str = "detector", weight: str = "1", status: str = "done") -> TaskRecord:
    """A terminal task of frame ``rid`` carrying ``weight`` of it."""
    now = time.time()
    return TaskRecord(
        rid, task, task.rsplit("/", 1)[-1].split(".", maxsplit=1)[0], status, "t4", True, now, now, now, 1,
        app="traffic", accepted_at=now - 1, deadline=now + 1, weight=weight,
    )  # fmt: skip


def test_sweeper_accounts_for_every_frame_past_its_deadline_once(env):
    # GIVEN three accepted frames of one POST: one answered, one dropped by its worker, one of whose
    # two car requests was lost (half of it recorded, the other half never)
    env.publish(plan(), changed=["detector", "car"])
    answered, dropped, stranded = env.send(3)
    env.results.record_tasks([done(answered), done(dropped, status="dropped")])
    env.results.record_tasks([done(stranded, "detector/car.0", weight="1/2")])
    deadline = env.results.get_request(stranded).deadline
    assert env.results.get_request(stranded).status == "queued"
    # WHEN the sweep runs once every deadline is past the grace
    metrics = MemoryMetrics()
    later = (due_bucket(deadline) + 1) * DUE_BUCKET_S + CFG.grace_s + 1
    report = sweep(env.results, metrics, None, later, CFG)
    # THEN the three are accounted for: one answered, two dropped (one stranded), none unaccounted
    assert report.buckets[-1] == due_bucket(deadline) and report.next_bucket == due_bucket(deadline) + 1
    assert (report.accepted, report.answered, report.dropped, report.stranded) == (3, 1, 2, 1)
    assert report.unaccounted == [] and report.settled == 1
    assert metrics.total("FramesUnaccounted") == 0 and metrics.total("FramesStranded", App="traffic") == 1
    got = env.results.get_request(stranded)
    assert got.status == "dropped"
    assert [(t.task_id, t.status, t.reason) for t in got.tasks if t.status == "dropped"] == [
        (STRANDED, "dropped", STRANDED)
    ]
    # the stranded half's outcome was emitted, as a worker emits it: half a frame dropped
    assert metrics.total("FramesDropped", App="traffic") == pytest.approx(0.5)
    assert metrics.weights("SloAttainment", App="traffic") == pytest.approx(0.5)
    # AND a second sweep of the same minutes (a lost cursor) changes nothing and emits nothing again
    again = MemoryMetrics()
    report = sweep(env.results, again, None, later, CFG)
    assert (report.accepted, report.answered, report.dropped, report.stranded, report.settled) == (
        3,
        1,
        2,
        0,
        0,
    )
    assert again.total("FramesUnaccounted") == 0 and again.values("SloAttainment", App="traffic") == []
    # AND a late worker that still answers the lost car afterwards does not undo the verdict
    env.results.record_tasks([done(stranded, "detector/car.1", weight="1/2")])
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
