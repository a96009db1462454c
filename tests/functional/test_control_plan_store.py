"""The plan store on moto: atomic version flips, conflicts, chunked fleets, slot claims, deletion."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from core.adapters.plan_store import (
    InstanceStatus,
    PlanStore,
    PlanStoreError,
    VersionConflictError,
    slot_content,
)
from core.schema import Deployment
from core.settings import DataPlaneConfig
from planner.packing import FleetPlan, Instance, Share
from skinflint.local.provision import create_base
from tests.functional.conftest import two_module_plan


@pytest.fixture
def ddb() -> Any:
    import boto3
    from moto import mock_aws

    with mock_aws():
        cfg = DataPlaneConfig()
        client = boto3.client("dynamodb", region_name=cfg.region)
        create_base(client, boto3.client("s3", region_name=cfg.region), cfg)
        yield client


def deployment(app: str, marker: float) -> Deployment:
    return Deployment(
        app=app,
        version=0,
        origin_s=1000.0,
        slo_s=2.0,
        frame_rate=marker,
        roots=["detector"],
        edges=[("detector", "car", 1.5)],
        plan=two_module_plan(),
        queues={"detector": {"0/0": f"https://q/{app}-d"}, "car": {"0/0": f"https://q/{app}-c0"}},
    )


def share(app: str, module: str = "detector", machine: int = 0, batch: int = 2) -> Share:
    return Share(
        app=app,
        module=module,
        group=0,
        machine=machine,
        hardware="t4",
        batch=batch,
        concurrency=1,
        duration_s=0.01,
        rate=4.0,
        occupancy=0.5,
    )


def fleet(marker: float, instances: int = 2, app_prefix: str = "app") -> FleetPlan:
    return FleetPlan(
        instances=[
            Instance(slot=f"t4/{i}", hardware="t4", shares=[share(f"{app_prefix}{i % 100}", machine=i)])
            for i in range(instances)
        ],
        prices={"t4": 0.526},
        occupancy_per_hour=marker,
        dedicated_per_hour=0.526 * instances,
    )


def publish(store: PlanStore, marker: float, expected: int | None, apps: int = 2, **kw: Any) -> Any:
    return store.publish(
        [deployment(f"app{i}", marker) for i in range(apps)],
        fleet(marker, **kw),
        expected=expected,
        activate_at=time.time(),
        reason=f"test {marker}",
    )


def table_keys(ddb: Any) -> list[str]:
    """Every key of the table: a Scan returns at most 1 MB per page (a fleet's parts are 300 KB each)."""
    pages = ddb.get_paginator("scan").paginate(TableName="skinflint-config", ProjectionExpression="pk")
    return sorted(i["pk"]["S"] for page in pages for i in page["Items"])


def test_publish_then_read_back(ddb: Any) -> None:
    store = PlanStore(ddb, "skinflint-config")
    assert store.current() is None
    m1 = publish(store, 1.0, None)
    cur = store.current()
    assert cur is not None and cur.version == m1.version and cur.previous is None
    assert set(cur.apps) == {"app0", "app1"} and cur.counts == {"t4": 2}
    assert cur.billed_per_hour == pytest.approx(2 * 0.526)
    deps = store.deployments(m1.version)
    assert {d.version for d in deps.values()} == {m1.version}  # stamped with the version
    assert store.deployment(m1.version, "app0") == deps["app0"]
    assert store.deployment(m1.version, "nope") is None
    assert store.fleet(m1.version) == fleet(1.0)
    m2 = publish(store, 2.0, m1.version)
    assert m2.previous == m1.version and store.current().version == m2.version  # type: ignore[union-attr]
    assert store.versions() == [m1.version, m2.version]


def test_stale_writer_gets_version_conflict_and_leaves_nothing(ddb: Any) -> None:
    store = PlanStore(ddb, "skinflint-config")
    m1 = publish(store, 1.0, None)
    publish(store, 2.0, m1.version)
    before = table_keys(ddb)
    with pytest.raises(VersionConflictError) as err:
        publish(store, 3.0, m1.version)
    assert err.value.expected == m1.version and err.value.actual == m1.version + 1
    assert table_keys(ddb) == before
    with pytest.raises(VersionConflictError):
        publish(store, 3.0, None)  # a second "first" writer


def test_two_writers_racing_on_one_expected_version_one_wins(ddb: Any) -> None:
    store = PlanStore(ddb, "skinflint-config")
    m1 = publish(store, 1.0, None)
    # GIVEN both writers read version m1; writer B flips between A's check and A's flip
    store_a, store_b = PlanStore(ddb, "skinflint-config"), PlanStore(ddb, "skinflint-config")
    real_flip = store_a._flip

    def late_flip(version: int, expected: int | None, doc: str) -> None:
        publish(store_b, 3.0, m1.version)
        real_flip(version, expected, doc)

    store_a._flip = late_flip  # type: ignore[method-assign]
    # WHEN A flips THEN A loses, B's version is current and A's items are gone
    with pytest.raises(VersionConflictError):
        publish(store_a, 2.0, m1.version)
    cur = store.current()
    assert cur is not None and cur.previous == m1.version
    assert store.deployments(cur.version)["app0"].frame_rate == 3.0
    assert store.versions() == [m1.version, cur.version]


def test_reader_racing_the_writer_never_sees_a_mixed_plan(ddb: Any) -> None:
    store = PlanStore(ddb, "skinflint-config")
    last = publish(store, 0.0, None).version
    stop = threading.Event()
    seen: list[float] = []
    errors: list[str] = []

    def reader() -> None:
        r = PlanStore(ddb, "skinflint-config")
        while not stop.is_set():
            m = r.current()
            assert m is not None
            deps = r.deployments(m.version)
            fl = r.fleet(m.version)
            markers = {d.frame_rate for d in deps.values()} | {fl.occupancy_per_hour if fl else -1.0}
            markers |= {e.frame_rate for e in m.apps.values()}
            if (
                len(markers) != 1
                or len(deps) != len(m.apps)
                or {d.version for d in deps.values()} != {m.version}
            ):
                errors.append(f"version {m.version}: markers {markers}, {len(deps)} apps")
            seen.append(markers.pop())

    t = threading.Thread(target=reader)
    t.start()
    try:
        for k in range(1, 13):
            # every third version is large enough to be split in parts
            last = publish(store, float(k), last, apps=3, instances=1500 if k % 3 == 0 else 3).version
    finally:
        stop.set()
        t.join(timeout=30)
    assert not errors, errors[:3]
    assert len(set(seen)) >= 3  # the reader did see several versions go by


def test_a_100_app_fleet_is_chunked_and_checksummed(ddb: Any) -> None:
    store = PlanStore(ddb, "skinflint-config")
    big = fleet(1.0, instances=4000)
    assert len(big.model_dump_json()) > 2 * 300_000
    m = store.publish(
        [deployment(f"app{i}", 1.0) for i in range(100)], big, expected=None, activate_at=0.0, reason="big"
    )
    assert store.fleet(m.version) == big
    assert len(store.deployments(m.version)) == 100
    parts = [k for k in table_keys(ddb) if k.startswith(f"plan#v{m.version:08d}#fleet#p")]
    assert len(parts) >= 3
    # a part overwritten by anything else fails the checksum
    ddb.put_item(TableName="skinflint-config", Item={"pk": {"S": parts[1]}, "data": {"B": b"garbage"}})
    with pytest.raises(PlanStoreError, match="checksum"):
        store.fleet(m.version)


class AtomicPuts:
    """The client with each ``put_item`` made atomic, as DynamoDB makes a conditional write: the
    in-process moto evaluates the condition and writes the item without a lock, so two threads can
    both pass ``attribute_not_exists`` (the claim test below failed that way once: two holders of a slot)."""

    def __init__(self, client: Any):
        self._client = client
        self._lock = threading.Lock()

    def put_item(self, **kwargs: Any) -> Any:
        with self._lock:
            return self._client.put_item(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_claims_one_holder_per_slot_idempotent_and_released(ddb: Any) -> None:
    store = PlanStore(ddb, "skinflint-config")
    v = publish(store, 1.0, None, instances=3).version
    got: dict[str, str | None] = {}
    atomic = AtomicPuts(ddb)  # the claims race in our code; the store's write is atomic, as on AWS

    def claim(iid: str) -> None:
        inst = PlanStore(atomic, "skinflint-config").claim(v, iid, "t4")
        got[iid] = inst.slot if inst else None

    threads = [threading.Thread(target=claim, args=(f"i-{n}",)) for n in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    slots = [s for s in got.values() if s is not None]
    assert sorted(slots) == ["t4/0", "t4/1", "t4/2"]  # 3 slots, 5 instances: two got none
    holders = store.claims(v)
    assert {c.slot: c.instance_id for c in holders.values()} == {s: i for i, s in got.items() if s}
    winner = next(i for i, s in got.items() if s == "t4/1")
    assert store.claim(v, winner, "t4").slot == "t4/1"  # type: ignore[union-attr]  # idempotent
    assert store.claim(v, "i-other", "v100") is None  # no slot of that hardware
    assert store.release(v, winner) == ["t4/1"]
    assert store.release(v, winner) == []
    assert store.claim(v, "i-late", "t4").slot == "t4/1"  # type: ignore[union-attr]


def test_claim_prefers_the_slot_whose_content_is_unchanged(ddb: Any) -> None:
    store = PlanStore(ddb, "skinflint-config")
    old = FleetPlan(
        instances=[
            Instance(slot="t4/0", hardware="t4", shares=[share("a", "detector")]),
            Instance(slot="t4/1", hardware="t4", shares=[share("a", "car")]),
        ],
        prices={"t4": 0.526},
        occupancy_per_hour=1.0,
        dedicated_per_hour=1.052,
    )
    new = FleetPlan(
        instances=[
            Instance(slot="t4/0", hardware="t4", shares=[share("a", "detector", batch=4)]),  # changed
            Instance(slot="t4/1", hardware="t4", shares=[share("b", "car")]),
            Instance(slot="t4/2", hardware="t4", shares=[share("a", "car")]),  # what t4/1 held
        ],
        prices={"t4": 0.526},
        occupancy_per_hour=1.0,
        dedicated_per_hour=1.578,
    )
    v1 = store.publish([deployment("a", 1.0)], old, expected=None, activate_at=0.0, reason="1").version
    v2 = store.publish([deployment("a", 1.0)], new, expected=v1, activate_at=0.0, reason="2").version
    inst = store.claim(v2, "i-car", "t4", prefer_slot="t4/1")
    assert inst is not None and inst.slot == "t4/2"
    assert slot_content(inst) == slot_content(old.instances[1])
    # the detector's slot changed content: it keeps its slot name (models in common: same app/module)
    assert store.claim(v2, "i-det", "t4", prefer_slot="t4/0").slot == "t4/0"  # type: ignore[union-attr]


def test_delete_version_removes_every_item_but_refuses_the_current_one(ddb: Any) -> None:
    store = PlanStore(ddb, "skinflint-config")
    v1 = publish(store, 1.0, None, instances=1500).version
    store.claim(v1, "i-1", "t4")
    v2 = publish(store, 2.0, v1).version
    with pytest.raises(PlanStoreError, match="current"):
        store.delete_version(v2)
    store.delete_version(v1)
    assert not [k for k in table_keys(ddb) if k.startswith(f"plan#v{v1:08d}")]
    assert store.versions() == [v2]
    assert store.deployments(v1) == {} and store.fleet(v1) is None


def test_instance_heartbeats(ddb: Any) -> None:
    store = PlanStore(ddb, "skinflint-config")
    store.put_instance(InstanceStatus(instance_id="i-1", hardware="t4", version=3, slot="t4/0", at=5.0))
    store.put_instance(InstanceStatus(instance_id="i-2", hardware="t4", state="starting", at=6.0))
    assert {i: s.version for i, s in store.instances().items()} == {"i-1": 3, "i-2": None}
    store.delete_instance("i-1")
    assert list(store.instances()) == ["i-2"]
