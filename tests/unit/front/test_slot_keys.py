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
    """The two conditional updates SlotCounter makes, and the writes per partition key. A refused
    condition carries the item as it was when asked (``ReturnValuesOnConditionCheckFailure``
    ``ALL_OLD``), unless ``old_on_refusal`` is False (a DynamoDB that does not return it)."""

    def __init__(self, old_on_refusal: bool = True) -> None:
        self.n: dict[str, int] = {}
        self.writes: Counter[str] = Counter()
        self.old_on_refusal = old_on_refusal

    def _refuse(self, kw: dict[str, Any], have: int | None) -> ClientError:
        error: dict[str, Any] = {"Error": {"Code": "ConditionalCheckFailedException"}}
        if self.old_on_refusal and kw.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD":
            error["Item"] = {**kw["Key"], **({"n": {"N": str(have)}} if have is not None else {})}
        return ClientError(error, "UpdateItem")

    def update_item(self, **kw: Any) -> None:
        pk = kw["Key"]["pk"]["S"] + "|" + kw["Key"]["sk"]["S"]
        self.writes[kw["Key"]["pk"]["S"]] += 1  # a refused condition is billed as a write too
        values = kw["ExpressionAttributeValues"]
        have = self.n.get(pk)
        if ":room" in values:  # take: ADD n k if n <= cap - k
            if have is not None and have > int(values[":room"]["N"]):
                raise self._refuse(kw, have)
            self.n[pk] = (have or 0) + int(values[":count"]["N"])
        else:  # release: ADD n -k if n >= k
            if have is None or have < int(values[":count"]["N"]):
                raise self._refuse(kw, have)
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


def _half_full_window(old_on_refusal: bool = True) -> tuple[Router, CountingDdb, Admission, float, int]:
    """Batch-10 windows of 0.25 s; another front put 5 frames in the arrival window (cap 10)."""
    router = Router.for_deployment(deployment(det_batch=10, det_rate=40.0, slo_s=1.5))
    ddb = CountingDdb(old_on_refusal)
    now = ORIGIN + 10.0 + 1e-4
    here = router.route("detector", now).batch_id
    SlotCounter(ddb, "t").take("traffic", 1, "detector", here, 10, 0.0, count=5)
    ddb.writes.clear()
    cfg = AdmissionConfig(burst_s=10.0, rate_headroom=100.0, key_rate_per_s=0.0, shared_slots=True)
    return router, ddb, Admission(cfg, SlotCounter(ddb, "t")), now, here


def test_a_post_that_partly_fits_a_window_takes_its_room_with_one_more_write_not_one_per_frame() -> None:
    # GIVEN the arrival window holds 5 of its 10 (another front's), unknown to this front
    router, ddb, front, now, here = _half_full_window()
    # WHEN a POST of 10 frames arrives
    out = front.admit(router, 10, now)
    # THEN 5 take the arrival window's room, 5 spill into the next, both windows exactly as counted,
    assert isinstance(out, Admitted) and out.shared_errors == 0
    assert [r["detector"].batch_id for r in out.routes] == [here] * 5 + [here + 1] * 5
    assert ddb.n[slot_key("traffic", 1, "detector", here)["pk"]["S"] + "|n"] == 10
    assert ddb.n[slot_key("traffic", 1, "detector", here + 1)["pk"]["S"] + "|n"] == 5
    # with 3 writes in all: the refused 10 and the 5 left in the arrival window, the 5 in the next
    # (one write per frame and refusals in between before: 12 for the arrival window alone)
    assert ddb.writes == {
        slot_key("traffic", 1, "detector", here)["pk"]["S"]: 2,
        slot_key("traffic", 1, "detector", here + 1)["pk"]["S"]: 1,
    }


def test_a_full_window_costs_one_refused_write_and_no_second() -> None:
    router, ddb, front, now, here = _half_full_window()
    SlotCounter(ddb, "t").take("traffic", 1, "detector", here, 10, 0.0, count=5)  # now full
    ddb.writes.clear()
    out = front.admit(router, 4, now)
    assert isinstance(out, Admitted) and [r["detector"].batch_id for r in out.routes] == [here + 1] * 4
    assert sum(ddb.writes.values()) == 2  # the refusal here, the 4 in the next window


def test_take_upto_without_the_count_in_the_refusal_tries_one_place() -> None:
    # a DynamoDB that does not return the item with a refused condition: one place, as take(1) would
    _, ddb, _, _, here = _half_full_window(old_on_refusal=False)
    counter = SlotCounter(ddb, "t")
    assert counter.take_upto("traffic", 1, "detector", here, 10, 0.0, 10) == 1
    assert counter.take_upto("traffic", 1, "detector", here, 10, 0.0, 1) == 1
    assert ddb.n[slot_key("traffic", 1, "detector", here)["pk"]["S"] + "|n"] == 7
    assert sum(ddb.writes.values()) == 3


def test_take_upto_counts_what_fits_with_at_most_two_writes() -> None:
    ddb = CountingDdb()
    counter = SlotCounter(ddb, "t")
    assert counter.take_upto("a", 1, "m", 7, 10, 0.0, 6) == 6  # fits: one write
    assert counter.take_upto("a", 1, "m", 7, 10, 0.0, 6) == 4  # 4 left: refused, then those 4
    assert counter.take_upto("a", 1, "m", 7, 10, 0.0, 3) == 0  # full: one refused write
    assert ddb.n == {"slot#a#v1#m#7|n": 10}
    assert ddb.writes == {"slot#a#v1#m#7": 4}
