"""The SQS body codec (core/wire.py): several tasks per message, shared fields carried once."""

from __future__ import annotations

import json

import pytest

from core import wire
from core.schema import Payload, TaskMessage, TaskOut


def task(
    request: str, task_id: str = "detector", *, b64: str = "AA==", lineage: int = 0, **extra
) -> TaskMessage:
    parents = [
        TaskOut(
            task_id=f"p{i}",
            module=f"m{i}",
            status="done",
            hardware="cpu",
            emulated=True,
            enqueued_at=1.0,
            started_at=2.0,
            finished_at=3.0,
            batch_size=4,
            output={"boxes": [[0.1, 0.2, 0.3, 0.4]] * 20},
        )
        for i in range(lineage)
    ]
    return TaskMessage(
        idempotency_key=f"{request}/{task_id}",
        request_id=request,
        task_id=task_id,
        app="traffic",
        module=task_id.rsplit("/", 1)[-1].split(".", maxsplit=1)[0],
        deployment_version=3,
        accepted_at=100.0,
        enqueued_at=100.5,
        deadline=101.0,
        module_deadline=100.8,
        group=0,
        machine=1,
        batch_id=7,
        window_end=100.6,
        payload=Payload(content_type="image/jpeg", size=len(b64) * 3 // 4, inline_b64=b64),
        lineage=parents,
        **extra,
    )


def test_a_single_task_is_the_v1_message_itself() -> None:
    one = task("r1")
    [(body, n)] = wire.pack([one])
    assert n == 1 and body == one.model_dump_json(exclude_none=True)
    assert json.loads(body)["v"] == 1
    assert wire.decode(body) == [one]


def test_several_tasks_round_trip_in_one_v2_body() -> None:
    msgs = [task(f"r{i}", b64="QUJD" * (i + 1)) for i in range(10)]
    msgs[3] = msgs[3].model_copy(update={"region": [0.1, 0.2, 0.5, 0.6], "recheck": True, "weight": "1/3"})
    [(body, n)] = wire.pack(msgs)
    assert n == 10 and json.loads(body)["v"] == 2
    assert wire.decode(body) == msgs  # order, optional fields and defaults kept


def test_children_of_one_parent_carry_the_frame_and_lineage_once() -> None:
    # GIVEN seven children of one frame (60 KB of base64 inline) with three ancestors' results
    frame = "A" * 60_000
    children = [
        task("r1", f"detector/car.{i}", b64=frame, lineage=3, region=[0, 0, 0.5, 0.5]) for i in range(7)
    ]
    # WHEN packed
    [(body, n)] = wire.pack(children)
    # THEN one body: the frame once, each ancestor once, the fields they share once
    doc = json.loads(body)
    assert n == 7 and len(doc["payloads"]) == 1 and len(doc["lineage"]) == 3
    assert body.count(frame) == 1
    assert {"app", "payload", "lineage", "deadline", "batch_id"} <= set(doc["common"])
    one = len(children[0].model_dump_json(exclude_none=True).encode())
    assert len(body.encode()) < one + 7 * 300  # the six more children cost their ids, not a frame each
    assert wire.decode(body) == children


@pytest.mark.parametrize(
    ("frame_bytes", "frames", "per_body"),
    [
        # 60 KB frames -> 80,000 base64 chars each: 3 x 80 KB = 240 KB <= 256 KiB, a fourth does not fit
        (60_000, 10, [3, 3, 3, 1]),
        # a 1080p JPEG inline at the front's 150 KB limit -> 200,000 chars: one per body
        (150_000, 3, [1, 1, 1]),
        # 10 KB frames -> 13,336 chars: all ten in one body (about 134 KB)
        (10_000, 10, [10]),
    ],
)
def test_bodies_split_at_the_sqs_message_limit(frame_bytes: int, frames: int, per_body: list[int]) -> None:
    b64_len = (frame_bytes + 2) // 3 * 4
    msgs = [task(f"r{i}", b64=chr(65 + i) * b64_len) for i in range(frames)]
    packed = wire.pack(msgs)
    assert [n for _, n in packed] == per_body
    assert all(len(body.encode()) <= wire.SQS_MESSAGE_LIMIT_BYTES for body, _ in packed)
    assert [m for body, _ in packed for m in wire.decode(body)] == msgs  # every task, in order


def test_a_task_over_the_limit_goes_alone() -> None:
    big = task("r-big", b64="Z" * 300_000)
    packed = wire.pack([task("r0"), big, task("r1")], limit_bytes=256 * 1024)
    assert [n for _, n in packed] == [1, 1, 1]
    assert wire.decode(packed[1][0]) == [big]


def test_a_small_limit_packs_fewer_per_body() -> None:
    msgs = [task(f"r{i}") for i in range(20)]
    packed = wire.pack(msgs, limit_bytes=2_000)
    assert len(packed) > 1 and all(len(body.encode()) <= 2_000 for body, _ in packed)
    assert [m for body, _ in packed for m in wire.decode(body)] == msgs


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[1, 2]",
        '{"v": 1, "request_id": "r"}',  # a v1 body missing fields
        '{"v": 3, "tasks": []}',
        '{"v": 2, "common": {}, "payloads": [], "lineage": [], "tasks": []}',  # no task
        '{"v": 2, "common": {}, "payloads": [], "lineage": [], "tasks": [{"payload": 0}]}',  # index out
        '{"v": 2, "common": {}, "payloads": [{}], "lineage": [], "tasks": [{"payload": true}]}',
        '{"v": 2, "tasks": [{}]}',  # no tables
    ],
)
def test_a_malformed_body_raises_value_error(body: str) -> None:
    with pytest.raises(ValueError):
        wire.decode(body)


def test_a_v2_body_with_one_bad_task_is_rejected_whole_and_its_ids_still_read() -> None:
    body = wire.encode([task("r1"), task("r2")])
    doc = json.loads(body)
    doc["tasks"][1]["deadline"] = "soon"
    bad = json.dumps(doc)
    with pytest.raises(ValueError):
        wire.decode(bad)
    assert [t["request_id"] for t in wire.raw_tasks(bad)] == ["r1", "r2"]
    assert wire.raw_tasks("nonsense") == [] and wire.raw_tasks('{"v": 2, "tasks": 5}') == []
