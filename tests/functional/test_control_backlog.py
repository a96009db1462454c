# ruff: noqa: F811 - the fixtures imported from the epoch tests are the tests' parameters
"""The backlog correction between epochs on moto: a served queue holding more than its plan allows
triggers an early epoch at a higher rate (more machines, a larger group); a quiet queue, a queue
nobody serves and a correction too soon after an epoch do not; the next epoch supersedes it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from core.adapters.plan_store import InstanceStatus
from core.schema import queue_key
from tests.functional.test_control_epoch import SPEC, clients, env  # noqa: F401 - the moto fixtures

if TYPE_CHECKING:
    from tests.functional.test_control_epoch import Env


def publish_and_serve(env: Env, *, serve: bool = True) -> int:
    """Register the app, publish its first version, let it activate and (``serve``) give every slot a
    live instance. Returns the version."""
    env.register(SPEC)
    out = env.ctl.run_epoch()
    assert out.status == "published" and out.version is not None
    env.clock.t += 20  # past activate_at (15 s) and the 10 s minimum gap
    v = out.version
    fleet = env.ctl.plans.fleet(v)
    assert fleet is not None
    for k, inst in enumerate(fleet.instances if serve else []):
        iid = f"i-{k:04d}"
        assert env.ctl.plans.claim(v, iid, inst.hardware) is not None
        env.ctl.plans.put_instance(
            InstanceStatus(instance_id=iid, hardware=inst.hardware, version=v, slot=inst.slot, at=env.clock())
        )
    return v


def fill(env: Env, version: int, module: str, extra: int) -> tuple[str, float]:
    """Put ``extra`` messages more than the plan allows into the first queue of ``module``."""
    dep = env.ctl.plans.deployment(version, "cams")
    assert dep is not None
    mp = dep.plan.modules[module]
    g = mp.groups[0]
    allowed = g.batch + g.rate_per_machine * mp.latency_budget_s
    url = dep.queues[module][queue_key(0, 0)]
    n = int(allowed) + extra
    for i in range(0, n, 10):
        entries = [{"Id": str(j), "MessageBody": "{}"} for j in range(min(10, n - i))]
        env.clients["sqs"].send_message_batch(QueueUrl=url, Entries=entries)
    return url, allowed


def test_a_quiet_queue_changes_nothing(env: Env) -> None:
    v = publish_and_serve(env)
    out = env.ctl.check_backlog()
    assert out.status == "quiet" and out.version == v and out.queues > 0, out.as_json()
    assert not out.late and not out.boosts and not out.epoch
    assert env.ctl.plans.current().version == v  # type: ignore[union-attr]
    assert env.metrics.total("BacklogCorrections") == 0


def test_a_backlog_triggers_an_early_replan_at_a_higher_rate(env: Env) -> None:
    # GIVEN a served plan whose detector queue holds 1,200 messages more than its plan allows: more than
    # its machines' spare throughput clears within an epoch (the detector's two machines run windows of
    # its planned rate, about 23 of their 40 req/s)
    v = publish_and_serve(env)
    before = env.ctl.plans.deployment(v, "cams")
    assert before is not None
    desired = env.desired()
    det_before = sum(g.machines * g.rate_per_machine for g in before.plan.modules["det"].groups)
    fill(env, v, "det", extra=1200)
    # WHEN the check runs between epochs
    out = env.ctl.check_backlog()
    # THEN it asks for enough detector capacity to clear the excess within an epoch (bounded) and
    # runs an early epoch that re-plans the app at that rate and grows the group at once
    assert out.status == "corrected", out.as_json()
    assert len(out.late) == 1 and out.late[0].startswith("cams.det 0/0")
    # det: W = its machines' rates; 1,200+ excess over 60 s: W * (1 + 1200 / (60 W)), above 1.1 W
    assert out.boosts["cams"] >= before.frame_rate * 1.1 - 1e-4  # boosts are kept to 4 decimals
    epoch = out.epoch
    assert epoch["status"] == "published" and epoch["reason"].startswith("backlog check: backlog of cams")
    assert epoch["rates"]["cams"]["backlog"] == pytest.approx(out.boosts["cams"], abs=1e-4)
    after = env.ctl.plans.deployment(epoch["version"], "cams")
    assert after is not None and after.frame_rate == pytest.approx(out.boosts["cams"], abs=1e-4)
    det_after = sum(g.machines * g.rate_per_machine for g in after.plan.modules["det"].groups)
    assert det_after > det_before
    assert sum(env.desired().values()) > sum(desired.values())
    assert env.metrics.total("BacklogCorrections", App="cams") == 1
    # the new version is activating: nothing is read until its queues are in use
    env.clock.t += 5
    assert env.ctl.check_backlog().status == "activating"
    # the next scheduled epoch plans from observed rates again: the boost is gone
    env.frames("cams", 20.0)
    env.clock.t += 60
    nxt = env.ctl.run_epoch()
    assert "backlog" not in nxt.rates["cams"] and nxt.rates["cams"]["planned"] < out.boosts["cams"]
    assert env.ctl.states.load().boosts == {}


def test_a_correction_waits_for_the_minimum_gap_and_then_cools_down(env: Env) -> None:
    v = publish_and_serve(env)
    env.frames("cams", 20.0)
    env.clock.t += 60
    assert env.ctl.run_epoch().status == "unchanged"  # a steady epoch: nothing new to activate
    env.clock.t += 5  # only 5 s after it
    fill(env, v, "det", extra=40)
    out = env.ctl.check_backlog()
    assert out.status == "deferred" and out.boosts and not out.epoch
    assert env.ctl.states.load().boosts["cams"] == pytest.approx(out.boosts["cams"], abs=1e-4)
    env.clock.t += 5  # 10 s after the epoch: the waiting boost runs, the app is cooling down
    again = env.ctl.check_backlog()
    assert again.status == "corrected" and again.cooling == ["cams"] and not again.boosts
    assert again.epoch["status"] == "published"
    assert again.epoch["rates"]["cams"]["backlog"] == pytest.approx(out.boosts["cams"], abs=1e-4)


def test_a_backlog_nobody_serves_is_not_a_capacity_problem(env: Env) -> None:
    v = publish_and_serve(env, serve=False)  # no instance holds any slot (they are still booting)
    fill(env, v, "det", extra=40)
    out = env.ctl.check_backlog()
    assert out.status == "quiet" and len(out.unserved) == 1 and not out.late and not out.boosts
    assert env.ctl.plans.current().version == v  # type: ignore[union-attr]


def test_frames_for_inverts_the_fan_outs(env: Env) -> None:
    from control.backlog import frames_for

    v = publish_and_serve(env)
    dep = env.ctl.plans.deployment(v, "cams")
    assert dep is not None
    # det gets 1 request per frame, cls 2: cls at 60 req/s needs 30 frames/s, det at 25 needs 25
    assert frames_for(dep, {"cls": 60.0}) == pytest.approx(30.0)
    assert frames_for(dep, {"det": 25.0, "cls": 40.0}) == pytest.approx(25.0)


def test_check_failure_is_reported_not_raised(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    publish_and_serve(env)

    def broken(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("depth read exploded")

    monkeypatch.setattr("control.epoch.read_backlog", broken)
    out = env.ctl.check_backlog()
    assert out.status == "failed" and "exploded" in (out.error or "")


def test_processed_messages_awaiting_their_batched_delete_are_not_a_backlog(env: Env) -> None:
    import dataclasses

    from core.settings import undeleted_bound

    # GIVEN a served plan whose detector queue holds, beyond what the plan allows, no more than the
    # processed messages a worker keeps in flight while their deletes linger (default 1 s)
    v = publish_and_serve(env)
    dep = env.ctl.plans.deployment(v, "cams")
    assert dep is not None
    rate = dep.plan.modules["det"].groups[0].rate_per_machine
    linger = env.ctl.config.delete_linger_s
    assert linger == 1.0
    extra = int(undeleted_bound(rate, linger))
    assert extra >= 1
    fill(env, v, "det", extra=extra)
    # THEN the check allows for them: quiet
    out = env.ctl.check_backlog()
    assert out.status == "quiet" and not out.late, out.as_json()
    # WHEN the workers delete at once (linger 0), the same depth is a backlog
    env.ctl.config = dataclasses.replace(env.ctl.config, delete_linger_s=0.0)
    out = env.ctl.check_backlog()
    assert len(out.late) == 1 and out.late[0].startswith("cams.det 0/0"), out.as_json()


def test_packed_messages_count_as_the_tasks_their_worker_reports(env: Env) -> None:
    # GIVEN a served plan whose detector queue holds fewer messages than its plan allows in tasks ...
    v = publish_and_serve(env)
    dep = env.ctl.plans.deployment(v, "cams")
    assert dep is not None
    mp = dep.plan.modules["det"]
    g = mp.groups[0]
    allowed = g.batch + g.rate_per_machine * mp.latency_budget_s
    url = dep.queues["det"][queue_key(0, 0)]
    n = max(1, int(allowed) // 2)
    for i in range(0, n, 10):
        entries = [{"Id": str(j), "MessageBody": "{}"} for j in range(min(10, n - i))]
        env.clients["sqs"].send_message_batch(QueueUrl=url, Entries=entries)
    assert env.ctl.check_backlog().status == "quiet"  # read as one task a message: no backlog
    # ... WHEN its worker's heartbeat says its messages carry 10 tasks each (POSTs of 10 frames)
    fleet = env.ctl.plans.fleet(v)
    assert fleet is not None
    share = "cams.det.g0.m0"
    k, inst = next((k, i) for k, i in enumerate(fleet.instances) if any(s.module == "det" for s in i.shares))
    beat = InstanceStatus(
        instance_id=f"i-{k:04d}", hardware=inst.hardware, version=v, slot=inst.slot, at=env.clock()
    )
    env.ctl.plans.put_instance(beat.model_copy(update={"shares": {share: {"tasks_per_message": 10.0}}}))
    out = env.ctl.check_backlog()
    # THEN the check reads 10 x n tasks, over the plan's allowance: late
    # (n = allowed // 2 messages x 10 = 5 x allowed > allowed)
    assert out.status == "corrected", out.as_json()
    assert any(line.startswith("cams.det 0/0") for line in out.late)


def test_a_quiet_check_reads_the_plan_store_eventually_consistently(env: Env) -> None:
    """The backlog (and activation) check runs every minute on AWS and every 2 s locally: the
    pointer through its hint, the claims, the heartbeats and the version's deployments and fleet
    are read eventually consistently (the control state alone consistently: its save is
    conditional on it)."""
    v = publish_and_serve(env)
    real = env.ctl.plans._ddb
    reads: list[tuple[str, bool, str]] = []

    class Recorder:
        def __getattr__(self, name: str) -> Any:
            call = getattr(real, name)
            if name not in ("get_item", "batch_get_item", "query", "scan"):
                return call

            def recorded(**kw: Any) -> Any:
                wants = kw.get("RequestItems", {}).values()
                consistent = bool(kw.get("ConsistentRead")) or any(w.get("ConsistentRead") for w in wants)
                reads.append((name, consistent, str(kw.get("Key", ""))[:60]))
                return call(**kw)

            return recorded

    env.ctl.plans._ddb = Recorder()
    try:
        for _ in range(3):
            out = env.ctl.check_backlog()
            assert out.status == "quiet" and out.version == v, out.as_json()
    finally:
        env.ctl.plans._ddb = real
    assert reads and not [read for read in reads if read[1]], reads
