"""The results table's idempotency gate against moto."""

from __future__ import annotations

import pytest

from functions.adapters.results import FrameRecord, TaskRecord

pytestmark = pytest.mark.functional


def rec(task_id: str, children: tuple[str, ...] = (), status: str = "done") -> TaskRecord:
    return TaskRecord(
        request_id="r1", task_id=task_id, module=task_id.rsplit("/", 1)[-1].split(".", 1)[0], status=status,
        hardware="t4", emulated=True, enqueued_at=1.0, started_at=1.1, finished_at=1.2, batch_size=1,
        children=children, output_json='{"ok":1}',
    )  # fmt: skip


CARS = ("detector/car.0", "detector/car.1")


def test_a_frame_is_done_when_every_task_reachable_from_its_roots_is_recorded(stack):
    # GIVEN a frame with one root whose detector task forwards two cars
    stack.results.create_frames([FrameRecord("r1", "traffic", 1.0, 3.0, roots=("detector",))])
    assert stack.results.get_request("r1").status == "queued"
    fresh, repeats = stack.results.record_tasks([rec("detector", children=CARS)])
    assert (len(fresh), len(repeats)) == (1, 0)
    assert stack.results.get_request("r1").status == "queued"
    stack.results.record_tasks([rec("detector/car.0")])
    assert stack.results.get_request("r1").status == "queued"  # car.1 still missing
    # WHEN the detector is redelivered and car.1 arrives
    fresh, repeats = stack.results.record_tasks([rec("detector", children=CARS)])
    assert (len(fresh), len(repeats)) == (0, 1)  # not recorded twice
    stack.results.record_tasks([rec("detector/car.1")])
    # THEN the frame is done with its three task items
    out = stack.results.get_request("r1")
    assert out.status == "done"
    assert sorted(t.task_id for t in out.tasks) == ["detector", *CARS]
    assert out.latency_s is not None


def test_a_frame_with_a_dropped_task_reads_as_dropped(stack):
    stack.results.create_frames([FrameRecord("r1", "traffic", 1.0, 3.0, roots=("detector",))])
    stack.results.record_tasks([rec("detector", status="dropped")])
    assert stack.results.get_request("r1").status == "dropped"
