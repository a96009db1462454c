"""Batch assembly for time-window dispatch: pure, no AWS."""

from __future__ import annotations

from core.schema import Payload, TaskMessage
from workers.batching import BatchAssembler


def msg(key: str, batch_id: int, window_end: float, deadline: float = 100.0) -> TaskMessage:
    return TaskMessage(
        idempotency_key=f"r{key}/m",
        request_id=f"r{key}",
        task_id="m",
        app="a",
        module="m",
        deployment_version=1,
        accepted_at=0.0,
        enqueued_at=0.0,
        deadline=deadline,
        module_deadline=deadline,
        group=0,
        machine=0,
        batch_id=batch_id,
        window_end=window_end,
        payload=Payload(content_type="image/jpeg", size=1, inline_b64="AA=="),
    )


def test_a_batch_closes_at_its_window_end_plus_grace():
    asm = BatchAssembler(batch=4, grace_s=0.02)
    asm.add(msg("1", 7, window_end=1.0), "h1", now=0.5)
    asm.add(msg("2", 7, window_end=1.0), "h2", now=0.6)
    assert asm.next_close() == 1.02
    assert asm.take_ready(1.01) == []
    ((bid, items),) = asm.take_ready(1.02)
    assert bid == 7 and [p.message.request_id for p in items] == ["r1", "r2"]
    assert len(asm) == 0


def test_a_full_batch_is_ready_before_its_window_closes():
    asm = BatchAssembler(batch=2, grace_s=0.02)
    asm.add(msg("1", 3, window_end=5.0), "h1", now=0.0)
    assert asm.take_ready(0.1) == []
    asm.add(msg("2", 3, window_end=5.0), "h2", now=0.1)
    assert asm.next_close() == float("-inf")
    assert [len(items) for _, items in asm.take_ready(0.1)] == [2]


def test_overfull_batch_is_split_earliest_deadline_first():
    # a burst of 5 into a batch-2 window: chunks of 2, 2, 1, by deadline
    asm = BatchAssembler(batch=2, grace_s=0.0)
    for k, dl in enumerate([5.0, 1.0, 4.0, 2.0, 3.0]):
        asm.add(msg(str(k), 1, window_end=1.0, deadline=dl), f"h{k}", now=0.0)
    chunks = asm.take_ready(1.0)
    assert [[p.message.deadline for p in items] for _, items in chunks] == [[1.0, 2.0], [3.0, 4.0], [5.0]]


def test_redelivery_of_a_buffered_message_is_folded_and_keeps_both_receipts():
    asm = BatchAssembler(batch=4, grace_s=0.0)
    asm.add(msg("1", 2, window_end=1.0), "first", now=0.0)
    asm.add(msg("1", 2, window_end=1.0), "again", now=0.5)
    ((_, items),) = asm.take_ready(1.0)
    assert len(items) == 1 and items[0].receipts == ["first", "again"]


def test_late_message_forms_a_batch_ready_at_once_and_drain_empties():
    asm = BatchAssembler(batch=4, grace_s=0.02)
    asm.add(msg("1", 1, window_end=1.0), "h1", now=2.0)  # its window closed a second ago
    assert [bid for bid, _ in asm.take_ready(2.0)] == [1]
    asm.add(msg("2", 9, window_end=9.0), "h2", now=2.0)
    assert [p.receipts for p in asm.drain()] == [["h2"]]
    assert asm.next_close() is None


def test_an_aligned_module_holds_a_full_batch_until_its_window_closes():
    """On an instance whose shares take turns (aligned duty cycle) a full batch must not start early:
    it would run during another share's turn."""
    asm = BatchAssembler(batch=2, grace_s=0.02, hold_full=True)
    asm.add(msg("1", 3, window_end=1.0), "h1", now=0.1)
    asm.add(msg("2", 3, window_end=1.0), "h2", now=0.2)
    assert asm.next_close() == 1.02
    assert asm.take_ready(0.5) == []
    ((bid, items),) = asm.take_ready(1.02)
    assert bid == 3 and len(items) == 2
