"""The all-in cost model (profiles/allin.py): the data plane's billing units per frame under the two
designs (the code as it is, and the unpacked wire before it), by hand arithmetic on the traffic app
(detector -> vehicle x2.0, person x1.5; batches of 16)."""

from __future__ import annotations

import pytest

from profiles import allin
from profiles.allin import (
    PER_TASK,
    SERVICES,
    TODAY,
    AllInError,
    Workload,
    batch_usd,
    data_plane_bill,
    policy_named,
    workload_from_plan,
)
from profiles.aws_prices import AwsPrices, load_aws_prices
from profiles.errors import StoreError

PRICES = load_aws_prices()
EDGES = [("detector", "vehicle", 2.0), ("detector", "person", 1.5)]


def traffic(fps: float = 1000, frame_kb: float = 8, per_post: int = 1, batch: int = 16) -> Workload:
    return workload_from_plan(
        {
            "detector": (fps, [(batch, fps)]),
            "vehicle": (2.0 * fps, [(batch, 2.0 * fps)]),
            "person": (1.5 * fps, [(batch, 1.5 * fps)]),
        },
        EDGES,
        frame_rate=fps,
        frame_kb=frame_kb,
        frames_per_post=per_post,
        instances=4,
    )


def test_today_counts_the_writes_the_code_makes_per_post_and_per_batch() -> None:
    units = data_plane_bill(TODAY, traffic(per_post=10), PRICES).units_per_frame
    # per POST of 10: the POST item (103 + 10 x 58 = 683 B, in its due minute's partition: no index
    # item), 1 unit, and the slot count (one root): 0.2 per frame. No per-task writes: a record item per leaf batch and
    # POST, max(1, KB + 0.5) units each (the mean of a unit per started KB over items of spread sizes).
    # vehicle: 20 tasks per POST, so a batch of 16 spans 1 + 15 / 20 = 1.75 POSTs, items of
    # 280 + (16 / 1.75 - 1) x 60 = 768.6 B; person: 15 per POST, 2 POSTs per batch, 700 B items
    vehicle = 1.75 * (768.5714 / 1024 + 0.5) / 16 * 2.0
    person = 2 * (700 / 1024 + 0.5) / 16 * 1.5
    assert units["dynamodb_write_units"] == pytest.approx(0.2 + vehicle + person)
    assert units["dynamodb_read_units"] == 0  # no outcome reads, no claims
    assert units["api_requests"] == units["lambda_invocations"] == pytest.approx(0.1)
    assert units["waf_requests"] == 0  # the HTTP API (the deployed default) has no web ACL
    # packed messages (core/wire.py): a root task is 260 B + the frame's base64 (10,922.67 B); a POST's
    # ten are one message of 300 + 10 x 11,182.67 = 112,127 B: one SendMessageBatch of 2 chunks (0.2 per
    # frame). A child carries its crop (0.23 of the frame's base64: 2,512 B) and its ancestor's result
    # once per parent (240 B): 3,012 B; a detector batch's 32 vehicles are one message of 96,690 B and
    # its 24 persons one of 72,593 B. Detector per 16 frames: 1.6 root messages in one receive of 3
    # chunks + a delete + the vehicle and person sends of 2 chunks each = 8 (0.5 per frame); vehicle:
    # half a message per batch (a receive of 2 chunks and a delete, per 2 batches): 1.5 per 16 x 2 / 16
    # = 0.1875; person: 2/3 of a message per batch, 2.0 per 16 x 1.5 / 16 = 0.1875
    assert units["sqs_requests"] == pytest.approx(0.2 + 0.5 + 0.1875 + 0.1875)
    assert units["tasks"] == pytest.approx(4.5)
    # a frame per POST: 1 + 1 units per frame (the POST item, the slot count), and records of fewer tasks (a batch of 16 spans 8.5 vehicle
    # POSTs and 11 person POSTs, items under 512 B: 1 unit each); a message per POST (11,483 B: a send of
    # 1 chunk per frame) and 16 per detector batch (1.6 receives of 2 chunks + 1.6 deletes + 4 = 8.8)
    single = data_plane_bill(TODAY, traffic(per_post=1), PRICES).units_per_frame
    assert single["dynamodb_write_units"] == pytest.approx(2 + 8.5 / 16 * 2.0 + 11 / 16 * 1.5)
    assert single["sqs_requests"] == pytest.approx(1 + 8.8 / 16 + 0.1875 + 0.1875)


def test_the_unpacked_wire_sends_a_message_per_task_with_the_whole_frame() -> None:
    units = data_plane_bill(PER_TASK, traffic(per_post=10), PRICES).units_per_frame
    # the same writes as today; a message per task with the frame inline: 512 + 8192 x 4/3 = 11,435 B (a
    # child + 471 B of lineage). Front: a SendMessageBatch of the POST's 10 messages, 2 chunks (0.2 per
    # frame); detector per 16: receive 1.6 calls x 2 chunks + delete 1.6 + vehicle 3.2 x 2 + person 2.4
    # x 2 = 16 -> 1 per frame; vehicle (3.2 + 1.6) / 16 x 2 = 0.6; person 0.3 x 1.5 = 0.45
    assert units["dynamodb_write_units"] == pytest.approx(
        data_plane_bill(TODAY, traffic(per_post=10), PRICES).units_per_frame["dynamodb_write_units"]
    )
    assert units["sqs_requests"] == pytest.approx(0.2 + 1 + 0.6 + 0.45)
    single = data_plane_bill(PER_TASK, traffic(per_post=1), PRICES).units_per_frame
    assert single["sqs_requests"] == pytest.approx(1 + 1 + 0.6 + 0.45)


def test_frames_over_the_inline_limit_go_to_s3_and_http_api_meters_per_512_kb() -> None:
    # 10 frames x 60 KB x 4/3 = 800 KB a POST: two 512 KB meters; each frame's 80 KB of base64 is under
    # the front's 200 KB inline limit: no S3, three frames to a root message
    units = data_plane_bill(TODAY, traffic(frame_kb=60, per_post=10), PRICES).units_per_frame
    assert units["api_requests"] == pytest.approx(0.2)
    assert units["s3_put_requests"] == units["s3_get_requests"] == 0
    assert allin._tasks_per_message(TODAY, traffic(frame_kb=60, per_post=10), "detector") == 3
    # the unpacked wire: every child carries the whole frame, over twice today's SQS requests
    per_task = data_plane_bill(PER_TASK, traffic(frame_kb=60, per_post=10), PRICES).units_per_frame
    assert per_task["sqs_requests"] > 2 * units["sqs_requests"]
    # a 200 KB frame (273 KB of base64) goes to S3: an object per frame, read by its root task; its
    # children's crops (63 KB of base64) still travel inline
    big = data_plane_bill(TODAY, traffic(frame_kb=200, per_post=10), PRICES).units_per_frame
    assert big["s3_put_requests"] == pytest.approx(1.0) and big["s3_get_requests"] == pytest.approx(1.0)


def test_the_bill_adds_up_and_says_where_its_prices_come_from() -> None:
    bill = data_plane_bill(TODAY, traffic(per_post=10), PRICES)
    assert tuple(bill.per_hour) == SERVICES
    items = bill.itemised()
    assert sum(v["per_hour"] for v in items.values()) == pytest.approx(bill.total_per_hour, abs=1e-5)
    # $/M frames = $/h / (1,000 frames/s x 3,600 s) x 1e6
    assert bill.per_million_frames(bill.total_per_hour) == pytest.approx(bill.total_per_hour / 3.6)
    # API Gateway: 0.1 HTTP API request per frame at 1.00 per million
    assert items["api_gateway"]["per_million_frames"] == pytest.approx(0.1)
    assert items["waf"]["per_hour"] == 0
    for entry in bill.prices.values():
        assert entry["as_of"] and entry["source"]
    assert "apigateway.HttpApiRequests" in bill.prices


@pytest.mark.parametrize("fps", [1000, 50000])
def test_today_costs_no_more_than_the_unpacked_wire_on_any_service(fps: float) -> None:
    today = data_plane_bill(TODAY, traffic(fps, per_post=10), PRICES).per_hour
    per_task = data_plane_bill(PER_TASK, traffic(fps, per_post=10), PRICES).per_hour
    for service in SERVICES:
        assert today[service] <= per_task[service] + 1e-12, service
    assert today["sqs"] < per_task["sqs"] / 2
    # today's data plane for traffic at 8 KB: about $5.8 per million frames at a frame per POST (an HTTP
    # API request, a Lambda invocation, the slot count and the POST item per frame), about $1.2 at 10
    bill = data_plane_bill(TODAY, traffic(fps), PRICES)
    assert 5.5 < bill.per_million_frames(bill.total_per_hour) < 6
    bill = data_plane_bill(TODAY, traffic(fps, per_post=10), PRICES)
    assert 1.1 < bill.per_million_frames(bill.total_per_hour) < 1.5


def test_a_larger_batch_makes_fewer_requests_per_task() -> None:
    w = traffic(per_post=10)
    per_task = [batch_usd(TODAY, w, "vehicle", b, PRICES) / b for b in (1, 2, 4, 8, 16, 32)]
    assert per_task == sorted(per_task, reverse=True) and per_task[0] > 2 * per_task[-1]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"frame_kb": 0}, "--frame-kb must be a number of KB > 0"),
        ({"frame_kb": float("nan")}, "--frame-kb must be a number of KB > 0"),
        ({"per_post": 0}, "--frames-per-post must be 1 to 10"),
        ({"per_post": 11}, "--frames-per-post must be 1 to 10"),
    ],
)
def test_bad_input_is_one_line(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(AllInError, match=message) as err:
        traffic(**kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


def test_an_unknown_policy_or_a_missing_price_is_one_line() -> None:
    with pytest.raises(AllInError, match="unknown data-plane policy 'nope'; choose one of today, per_task"):
        policy_named("nope")
    doc = PRICES.model_dump()
    del doc["services"]["sqs"]
    with pytest.raises(StoreError, match=r"no price for sqs\.Requests"):
        data_plane_bill(TODAY, traffic(), AwsPrices.model_validate(doc))


def test_a_push_sink_keeps_only_the_posts_in_the_table() -> None:
    push = TODAY.with_(result_sink="sqs")
    bill = data_plane_bill(push, traffic(per_post=10), PRICES)
    # written: the slot count (0.1 WCU per frame) and the POST item (0.1), and kept: 100 POSTs/s of
    # 683 B for 7 days, at 0.25 + 0.20 (PITR) per GB-month
    writes = 0.2 * 1000 * 3600 * 0.625e-6
    kept_gb = 100 * 683 * 7 * 86400 / 1024**3
    assert bill.per_hour["dynamodb"] == pytest.approx(writes + kept_gb * 0.45 / 730)
    # the results queue: per leaf batch of 16 a send, a receive (1 chunk each) and a delete
    pull = data_plane_bill(TODAY, traffic(per_post=10), PRICES).units_per_frame
    assert bill.units_per_frame["sqs_requests"] == pytest.approx(pull["sqs_requests"] + 3 / 16 * 3.5)


def test_a_deeper_module_carries_each_ancestors_result() -> None:
    # actdet's chain: detector -> tracker -> action; an action message carries two ancestors' results
    w = workload_from_plan(
        {"d": (100.0, [(10, 100.0)]), "t": (100.0, [(10, 100.0)]), "a": (200.0, [(10, 200.0)])},
        [("d", "t", 1.0), ("t", "a", 2.0)],
        frame_rate=100,
        frame_kb=8,
        frames_per_post=10,
    )
    # the unpacked wire: a message per task, every one with the whole frame, each ancestor's result in full
    per_ancestor = PER_TASK.parent_result_bytes
    sizes = {m: allin._message_bytes(PER_TASK, w, m) for m in ("d", "t", "a")}
    assert sizes["t"] - sizes["d"] == pytest.approx(per_ancestor)
    assert sizes["a"] - sizes["d"] == pytest.approx(2 * per_ancestor)
    # today: children carry crops, and a task's share of each ancestor's result carried once per parent
    tasks = {m: allin._task_bytes(TODAY, w, m) for m in ("t", "a")}
    assert tasks["a"] - tasks["t"] == pytest.approx(TODAY.parent_result_bytes)


def test_each_configuration_carries_its_share_of_the_rate_not_the_dummy_load() -> None:
    # groups carry 1,200 + 600 = 1,800 tasks/s (dummy load included) of a 1,500 tasks/s module
    w = workload_from_plan(
        {"m": (1500.0, [(16, 1200.0), (4, 600.0)])}, [], frame_rate=1500, frame_kb=8, frames_per_post=1
    )
    load = w.module("m")
    assert load.groups == ((16.0, 1000.0), (4.0, 500.0))
    assert load.batch == pytest.approx((16 * 1000 + 4 * 500) / 1500)  # 12
    # the unpacked wire's deep queues: 10 messages per receive and per delete, whatever the batch; a
    # receive of 10 messages of 11,435 B is 2 chunks: per task a send 1, receive 0.2, delete 0.1
    units = data_plane_bill(PER_TASK.with_(slot_updates_per_post=0.0), w, PRICES).units_per_frame
    assert units["sqs_requests"] == pytest.approx(1 + 0.2 + 0.1)


def test_a_separate_deadline_index_item_costs_a_write_unit_per_post() -> None:
    w = traffic(per_post=10)
    with_index = data_plane_bill(TODAY.with_(index_item=True), w, PRICES).units_per_frame
    today = data_plane_bill(TODAY, w, PRICES).units_per_frame
    assert with_index["dynamodb_write_units"] - today["dynamodb_write_units"] == pytest.approx(0.1)
