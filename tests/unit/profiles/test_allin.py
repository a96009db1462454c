"""The all-in cost model (profiles/allin.py): the data plane's billing units per frame under the two
designs, by hand arithmetic on the traffic app (detector -> vehicle x2.0, person x1.5; batches of 16)."""

from __future__ import annotations

import pytest

from profiles.allin import (
    BATCHED,
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


def test_today_counts_the_writes_and_reads_the_code_makes_per_frame() -> None:
    units = data_plane_bill(TODAY, traffic(), PRICES).units_per_frame
    # frame item 1 + slot count 1 (one root) + a task item per task 4.5 + the outcome claim 1
    assert units["dynamodb_write_units"] == pytest.approx(7.5)
    # two leaf modules reached, each check reads frame + outcome + root (3); the tree's 3.5 children
    # once, and 0.36 of the later check: 3 x 2 + 3.5 x (1 + 0.36) = 10.76 (issue #25 measured 10.7)
    assert units["dynamodb_read_units"] == pytest.approx(10.76)
    assert units["api_requests"] == units["waf_requests"] == units["lambda_invocations"] == 1
    # a message per task with the frame inline: 600 + 300 + 8192 x 4/3 = 11,823 B (a child 12,023 B)
    # front 1; detector per 16: receive 1.6 calls x 2 chunks + delete 1.6 + vehicle 3.2 x 2 + person
    # 2.4 x 2 = 16 -> 1 per frame; vehicle (3.2 + 1.6) / 16 x 2 = 0.6; person 0.3 x 1.5 = 0.45
    assert units["sqs_requests"] == pytest.approx(1 + 1 + 0.6 + 0.45)
    assert units["tasks"] == pytest.approx(4.5)


def test_batched_carries_frames_once_and_writes_a_record_per_leaf_batch() -> None:
    units = data_plane_bill(BATCHED, traffic(per_post=10), PRICES).units_per_frame
    assert units["api_requests"] == units["lambda_invocations"] == pytest.approx(0.1)
    assert units["waf_requests"] == 0 and units["dynamodb_read_units"] == 0
    # slot count 0.1 per frame + a 3,800 B record (600 + 16 x 200) = 4 units per leaf batch of 16:
    # 4 / 16 x (2.0 + 1.5) = 0.875
    assert units["dynamodb_write_units"] == pytest.approx(0.1 + 0.875)
    # root message 600 + 10 x (300 + 10,923) = 112,827 B: 2 chunks per POST (0.2); detector per 16 frames:
    # receive 3 chunks + delete 1 + a vehicle and a person message of 2 chunks each = 8 (0.5 per frame);
    # vehicle: a 32-task message per 2 batches (1 receive of 2 chunks + 0.5 delete per 16) x 2 / 16 =
    # 0.1875; person: a 24-task message per 1.5 batches (2 per 16) x 1.5 / 16 = 0.1875
    assert units["sqs_requests"] == pytest.approx(0.2 + 0.5 + 0.1875 + 0.1875)
    assert units["s3_put_requests"] == 0


def test_large_posts_go_to_s3_once_and_http_api_meters_per_512_kb() -> None:
    # 10 frames x 60 KB x 4/3 = 800 KB: over SQS's 256 KB (one S3 object per POST) and two 512 KB meters
    units = data_plane_bill(BATCHED, traffic(frame_kb=60, per_post=10), PRICES).units_per_frame
    assert units["s3_put_requests"] == pytest.approx(0.1)
    assert units["api_requests"] == pytest.approx(0.2)
    # today: a 60 KB frame still fits a message inline (82 KB): no S3, but every child carries it
    today = data_plane_bill(TODAY, traffic(frame_kb=60), PRICES).units_per_frame
    assert today["s3_put_requests"] == 0 and today["sqs_requests"] > units["sqs_requests"] * 3


def test_the_bill_adds_up_and_says_where_its_prices_come_from() -> None:
    bill = data_plane_bill(BATCHED, traffic(per_post=10), PRICES)
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
def test_batched_costs_less_than_today_on_every_service_but_s3(fps: float) -> None:
    today = data_plane_bill(TODAY, traffic(fps), PRICES).per_hour
    batched = data_plane_bill(BATCHED, traffic(fps, per_post=10), PRICES).per_hour
    for service in SERVICES:
        if service != "s3":
            assert batched[service] <= today[service], service
    # the cross-check: today's data plane for traffic at 1,000 fps, 8 KB is about $13/M frames
    bill = data_plane_bill(TODAY, traffic(fps), PRICES)
    assert 11 < bill.per_million_frames(bill.total_per_hour) < 15


def test_a_larger_batch_makes_fewer_requests_per_task() -> None:
    w = traffic(per_post=10)
    per_task = [batch_usd(BATCHED, w, "vehicle", b, PRICES) / b for b in (1, 2, 4, 8, 16, 32)]
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
    with pytest.raises(AllInError, match="unknown data-plane policy 'nope'; choose one of today, batched"):
        policy_named("nope")
    doc = PRICES.model_dump()
    del doc["services"]["sqs"]
    with pytest.raises(StoreError, match=r"no price for sqs\.Requests"):
        data_plane_bill(TODAY, traffic(), AwsPrices.model_validate(doc))


def test_a_push_sink_keeps_nothing_in_the_table() -> None:
    push = BATCHED.with_(result_sink="sqs")
    bill = data_plane_bill(push, traffic(per_post=10), PRICES)
    # only the slot count is written: 0.1 WCU per frame x 1,000 frames/s x 3,600 s x 0.625 / 1e6
    assert bill.per_hour["dynamodb"] == pytest.approx(0.1 * 1000 * 3600 * 0.625e-6)
    # the results queue: per leaf batch of 16 a send, a receive (1 chunk each) and a delete
    pull = data_plane_bill(BATCHED, traffic(per_post=10), PRICES).units_per_frame
    assert bill.units_per_frame["sqs_requests"] == pytest.approx(pull["sqs_requests"] + 3 / 16 * 3.5)


def test_each_configuration_carries_its_share_of_the_rate_not_the_dummy_load() -> None:
    # groups carry 1,200 + 600 = 1,800 tasks/s (dummy load included) of a 1,500 tasks/s module
    w = workload_from_plan(
        {"m": (1500.0, [(16, 1200.0), (4, 600.0)])}, [], frame_rate=1500, frame_kb=8, frames_per_post=1
    )
    load = w.module("m")
    assert load.groups == ((16.0, 1000.0), (4.0, 500.0))
    assert load.batch == pytest.approx((16 * 1000 + 4 * 500) / 1500)  # 12
    # today's deep queues: 10 messages per receive and per delete, whatever the batch; a receive of 10
    # messages of 11,823 B is 2 chunks: per task a send 1, receive 0.2, delete 0.1
    units = data_plane_bill(TODAY.with_(slot_updates_per_frame=0.0), w, PRICES).units_per_frame
    assert units["sqs_requests"] == pytest.approx(1 + 0.2 + 0.1)
