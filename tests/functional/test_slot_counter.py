"""Shared batch-slot counts (DynamoDB, moto): two front instances keep a root window within its cap."""

from __future__ import annotations

from typing import Any

import pytest

from core.adapters.slots import SlotCounter, slot_key
from core.routing import Router
from core.settings import DataPlaneConfig
from front.admission import Admission, AdmissionConfig, Admitted, Shed
from skinflint.local.provision import create_base
from tests.unit.front.test_admission import ORIGIN, _dispatch_aware, deployment

pytestmark = pytest.mark.functional


@pytest.fixture
def ddb() -> Any:
    import boto3
    from moto import mock_aws

    with mock_aws():
        cfg = DataPlaneConfig()
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_base(client, boto3.client("s3", region_name="us-east-1"), cfg)
        yield client, cfg.results_table


def fronts(ddb: Any, shared: bool) -> tuple[Router, Admission, Admission]:
    client, table = ddb
    # batch-2 windows of 0.25 s for a stream of 4 frames/s: at most 1 frame per window (the plan's)
    router = Router.for_deployment(_dispatch_aware(deployment(det_batch=2, slo_s=1.5), 4.0))
    cfg = AdmissionConfig(burst_s=10.0, shared_slots=shared)
    return router, Admission(cfg, SlotCounter(client, table)), Admission(cfg, SlotCounter(client, table))


def test_two_front_instances_fill_a_window_to_its_cap_once(ddb: Any) -> None:
    router, a, b = fronts(ddb, shared=True)
    now = ORIGIN + 10.01
    here = router.route("detector", now).batch_id
    first, second = a.admit(router, 1, now), b.admit(router, 1, now)
    assert isinstance(first, Admitted) and isinstance(second, Admitted)
    assert first.routes[0]["detector"].batch_id == here
    assert second.routes[0]["detector"].batch_id == here + 1 and second.spilled == 1
    client, table = ddb
    item = client.get_item(TableName=table, Key=slot_key("traffic", 1, "detector", here))["Item"]
    assert item["n"] == {"N": "1"} and float(item["expires_at"]["N"]) > first.routes[0]["detector"].window_end


def test_without_the_shared_count_each_instance_fills_the_window(ddb: Any) -> None:
    router, a, b = fronts(ddb, shared=False)
    now = ORIGIN + 10.01
    here = router.route("detector", now).batch_id
    outs = [a.admit(router, 1, now), b.admit(router, 1, now)]
    assert [o.routes[0]["detector"].batch_id for o in outs if isinstance(o, Admitted)] == [here, here]


def test_a_refused_batch_gives_its_places_back(ddb: Any) -> None:
    client, table = ddb
    router = Router.for_deployment(_dispatch_aware(deployment(det_batch=2, slo_s=0.6), 8.0))
    cfg = AdmissionConfig(burst_s=10.0, shared_slots=True)
    a = Admission(cfg, SlotCounter(client, table))
    now = ORIGIN + 10.0 + 1e-4
    here = router.route("detector", now).batch_id
    assert isinstance(a.admit(router, 3, now), Shed)  # 2 places in the only window in time
    item = client.get_item(TableName=table, Key=slot_key("traffic", 1, "detector", here))["Item"]
    assert item["n"] == {"N": "0"}
    b = Admission(cfg, SlotCounter(client, table))
    assert isinstance(b.admit(router, 2, now), Admitted)


def test_an_unreachable_table_fails_open(ddb: Any) -> None:
    client, _ = ddb
    router = Router.for_deployment(_dispatch_aware(deployment(det_batch=2, slo_s=1.5), 4.0))
    a = Admission(AdmissionConfig(burst_s=10.0, shared_slots=True), SlotCounter(client, "no-such-table"))
    out = a.admit(router, 1, ORIGIN + 10.01)
    assert isinstance(out, Admitted) and out.shared_errors == 1


def test_a_post_takes_what_is_left_of_a_window_another_front_half_filled(ddb: Any) -> None:
    # GIVEN batch-10 windows of 0.25 s and two fronts: the first put 6 frames in the arrival window
    client, table = ddb
    router = Router.for_deployment(deployment(det_batch=10, det_rate=40.0, slo_s=1.5))
    cfg = AdmissionConfig(burst_s=10.0, rate_headroom=100.0, key_rate_per_s=0.0, shared_slots=True)
    a, b = Admission(cfg, SlotCounter(client, table)), Admission(cfg, SlotCounter(client, table))
    now = ORIGIN + 10.0 + 1e-4
    here = router.route("detector", now).batch_id
    assert isinstance(a.admit(router, 6, now), Admitted)
    # WHEN the second front admits a POST of 10 frames
    out = b.admit(router, 10, now)
    # THEN the 4 places left in the arrival window are its first 4 frames (DynamoDB's refusal said
    # how many were left), the other 6 are in the next window, and both windows count exactly that
    assert isinstance(out, Admitted) and out.shared_errors == 0
    assert [r["detector"].batch_id for r in out.routes] == [here] * 4 + [here + 1] * 6
    for batch, n in ((here, "10"), (here + 1, "6")):
        item = client.get_item(TableName=table, Key=slot_key("traffic", 1, "detector", batch))["Item"]
        assert item["n"] == {"N": n}
