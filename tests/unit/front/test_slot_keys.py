"""The shared slot counter has no hot key: each window is its own partition key, so a key takes at
most the window's cap plus one refused condition per front instance (an in-memory DynamoDB)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from botocore.exceptions import ClientError

from core.adapters.slots import SlotCounter, slot_key
from core.routing import Router
from front.admission import Admission, AdmissionConfig, Admitted
from tests.unit.front.test_admission import ORIGIN, _dispatch_aware, deployment


class CountingDdb:
    """The two conditional updates SlotCounter makes, and the writes per partition key."""

    def __init__(self) -> None:
        self.n: dict[str, int] = {}
        self.writes: Counter[str] = Counter()

    def update_item(self, **kw: Any) -> None:
        pk = kw["Key"]["pk"]["S"] + "|" + kw["Key"]["sk"]["S"]
        self.writes[kw["Key"]["pk"]["S"]] += 1  # a refused condition is billed as a write too
        values = kw["ExpressionAttributeValues"]
        have = self.n.get(pk)
        if ":room" in values:  # take: ADD n k if n <= cap - k
            if have is not None and have > int(values[":room"]["N"]):
                raise ClientError({"Error": {"Code": "ConditionalCheckFailedException"}}, "UpdateItem")
            self.n[pk] = (have or 0) + int(values[":count"]["N"])
        else:  # release: ADD n -k if n >= k
            if have is None or have < int(values[":count"]["N"]):
                raise ClientError({"Error": {"Code": "ConditionalCheckFailedException"}}, "UpdateItem")
            self.n[pk] = have + int(values[":minus"]["N"])


def test_consecutive_windows_are_distinct_partition_keys() -> None:
    keys = {slot_key("traffic", 3, "detector", batch)["pk"]["S"] for batch in range(1000)}
    assert len(keys) == 1000


def test_three_fronts_at_twice_the_planned_rate_spread_their_writes_over_the_windows() -> None:
    # GIVEN batch-2 windows of 0.25 s sized for 4 frames/s (cap 1 frame per window), three front
    # instances sharing the count, frames at 8 frames/s for 30 s round-robin over the fronts
    router = Router.for_deployment(_dispatch_aware(deployment(det_batch=2, slo_s=1.5), 4.0))
    ddb = CountingDdb()
    fronts = [
        Admission(AdmissionConfig(burst_s=10.0, rate_headroom=10.0, shared_slots=True), SlotCounter(ddb, "t"))
        for _ in range(3)
    ]
    admitted = 0
    for k in range(240):
        out = fronts[k % 3].admit(router, 1, ORIGIN + 10.0 + k / 8.0)
        admitted += isinstance(out, Admitted)
    # THEN every window holds at most its cap of 1 across the three fronts (the admission guarantee),
    assert admitted > 0 and max(ddb.n.values()) == 1
    # each key took at most cap (1) + one refusal per front (3) writes, and 120 windows in 30 s each
    # had a key of their own (the old layout put all 240+ writes on one key)
    assert max(ddb.writes.values()) <= 1 + 3
    assert len(ddb.writes) >= admitted
    # the price of counting optimistically: a window another front filled costs a refused write
    # (billed); here 3 writes per admitted frame (1 + a refusal by each of the 2 other fronts)
    assert admitted <= sum(ddb.writes.values()) <= 3 * admitted


def test_a_json_batch_is_counted_with_one_write_per_window() -> None:
    # GIVEN batch-4 windows (no dispatch figure: the batch is the cap) and one shared counter
    router = Router.for_deployment(deployment(det_batch=4, slo_s=1.5))
    ddb = CountingDdb()
    front = Admission(AdmissionConfig(burst_s=10.0, shared_slots=True), SlotCounter(ddb, "t"))
    now = ORIGIN + 10.0 + 1e-4
    here = router.route("detector", now).batch_id
    # WHEN a JSON batch of 6 frames arrives: 4 fit the arrival window, 2 spill into the next
    out = front.admit(router, 6, now)
    assert isinstance(out, Admitted)
    assert [r["detector"].batch_id for r in out.routes] == [here] * 4 + [here + 1] * 2
    # THEN two writes in all (one per window), each window counted to what it took
    assert sum(ddb.writes.values()) == 2
    assert sorted(ddb.n.values()) == [2, 4]


def test_a_batch_that_does_not_fit_together_falls_back_to_one_frame_and_gives_back_all() -> None:
    # GIVEN another front put 3 frames in the arrival window (cap 4)
    router = Router.for_deployment(deployment(det_batch=4, slo_s=1.5))
    ddb = CountingDdb()
    now = ORIGIN + 10.0 + 1e-4
    here = router.route("detector", now).batch_id
    SlotCounter(ddb, "t").take("traffic", 1, "detector", here, 4, 0.0, count=3)
    front = Admission(AdmissionConfig(burst_s=10.0, shared_slots=True), SlotCounter(ddb, "t"))
    # WHEN a batch of 2 arrives: 2 do not fit (3 + 2 > 4), one does (a second write), the next window
    # takes the other
    out = front.admit(router, 2, now)
    assert isinstance(out, Admitted)
    assert [r["detector"].batch_id for r in out.routes] == [here, here + 1]
    assert ddb.n[slot_key("traffic", 1, "detector", here)["pk"]["S"] + "|n"] == 4
